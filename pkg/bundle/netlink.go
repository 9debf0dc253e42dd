package bundle

import (
	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
)

// link is one link of the netns as netlink shows it.
type link struct {
	Index     int      `json:"index"`
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	AltNames  []string `json:"altNames,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	MTU       int      `json:"mtu"`
	OperState string   `json:"operState"`
	Flags     string   `json:"flags"`
	ParentBus string   `json:"parentBus,omitempty"`
	ParentDev string   `json:"parentDev,omitempty"`
	Master    int      `json:"masterIndex,omitempty"`
	VFs       []vfLink `json:"vfs,omitempty"`
}

// vfLink is a PF's view of one of its VFs (IFLA_VFINFO_LIST).
type vfLink struct {
	ID        int    `json:"id"`
	MAC       string `json:"mac"`
	Vlan      int    `json:"vlan"`
	LinkState uint32 `json:"linkState"` // 0 auto, 1 enable, 2 disable
	Spoofchk  bool   `json:"spoofchk"`
	Trust     uint32 `json:"trust"`
}

// netlink writes netlink/links.json and netlink/rdma.json for the calling
// thread's netns.
// Equivalent to: ip -d -j link show; rdma -j system; rdma -j dev; rdma -j link
func (b *writer) netlink(on bool) error {
	if !on {
		return nil
	}
	links, err := netlinksafe.LinkList()
	if err != nil {
		b.problem("netlink links: %v", err)
	} else {
		out := make([]link, 0, len(links))
		for _, l := range links {
			a := l.Attrs()
			nl := link{Index: a.Index, Name: a.Name, Type: l.Type(), AltNames: a.AltNames, MAC: a.HardwareAddr.String(), MTU: a.MTU,
				OperState: a.OperState.String(), Flags: a.Flags.String(), ParentBus: a.ParentDevBus, ParentDev: a.ParentDev, Master: a.MasterIndex}
			for _, v := range a.Vfs {
				nl.VFs = append(nl.VFs, vfLink{ID: v.ID, MAC: v.Mac.String(), Vlan: v.Vlan, LinkState: v.LinkState, Spoofchk: v.Spoofchk, Trust: v.Trust})
			}
			out = append(out, nl)
		}
		if err := b.addJSON("netlink/links.json", "netlink RTM_GETLINK dump", out); err != nil {
			return err
		}
	}
	view, err := rdma.NetlinkView()
	if err != nil {
		b.problem("netlink RDMA: %v (no ib_core loaded, or no RDMA device)", err)
		return nil
	}
	return b.addJSON("netlink/rdma.json", "RDMA netlink (rdma system, dev, link)", view)
}
