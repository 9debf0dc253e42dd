package plugin

import (
	"encoding/json"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
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

// printResult writes res to stdout as cniVersion ver, as types.PrintResult
// does. A current.Result is encoded in one pass: the library's encoder
// marshals it, decodes that into a map and marshals the map again, only to
// drop an empty "dns"; here an empty DNS is left out by omitempty on a
// pointer. The JSON differs only in key order. Older versions go through
// the library's conversion.
func printResult(res *current.Result, ver string) error {
	if res.CNIVersion != ver || !slices.Contains(resultVersions, ver) {
		return types.PrintResult(res, ver)
	}
	out, err := encodeResult(res)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// encodeResult is res as printResult writes it.
func encodeResult(res *current.Result) ([]byte, error) {
	return json.MarshalIndent(printable(res), "", "    ")
}

// resultFields is current.Result without its methods, so encoding/json
// encodes its fields directly.
type resultFields current.Result

// printableResult is a result whose DNS is left out when empty; its DNS
// field is shallower than the embedded one, so encoding/json uses it.
type printableResult struct {
	*resultFields
	DNS *types.DNS `json:"dns,omitempty"`
}

func printable(res *current.Result) printableResult {
	p := printableResult{resultFields: (*resultFields)(res)}
	if !res.DNS.IsEmpty() {
		p.DNS = &res.DNS
	}
	return p
}
