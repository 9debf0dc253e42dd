package plugin

import (
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// ourInterface finds the index of this attachment's entry in a result: an
// interface in the pod's sandbox (or with no sandbox) whose pciID, name or
// MAC says it is ours. -1 when there is none.
func ourInterface(res *current.Result, netns, ifName, pci, mac string) int {
	best := -1
	for i, iface := range res.Interfaces {
		if iface.Sandbox != "" && iface.Sandbox != netns {
			continue
		}
		switch {
		case pci != "" && iface.PciID == pci:
			return i
		case iface.Name == ifName, mac != "" && strings.EqualFold(iface.Mac, mac):
			if best < 0 {
				best = i
			}
		}
	}
	return best
}

// correctResult returns the chain's result with this attachment's interface
// entry set to what the pod really holds, appended when the plugins before
// us left none. Appending keeps every IP's interface index valid.
func correctResult(prev *current.Result, want current.Interface) *current.Result {
	res := *prev
	res.Interfaces = make([]*current.Interface, len(prev.Interfaces))
	for i, iface := range prev.Interfaces {
		c := *iface
		res.Interfaces[i] = &c
	}
	i := ourInterface(&res, want.Sandbox, want.Name, want.PciID, want.Mac)
	if i < 0 {
		res.Interfaces = append(res.Interfaces, &want)
		return &res
	}
	entry := res.Interfaces[i]
	entry.Name, entry.Mac, entry.Mtu, entry.Sandbox, entry.PciID = want.Name, want.Mac, want.Mtu, want.Sandbox, want.PciID
	return &res
}
