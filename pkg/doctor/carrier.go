package doctor

import (
	"fmt"
	"slices"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

// checkCarrier (carrier) reports each function whose host netdev is up
// without carrier: on Ethernet (RoCE) the PF's cable or switch port, on a
// VF its link state policy or the PF's link. A netdev that is down says
// nothing about its carrier (the kernel clears IFF_LOWER_UP with IFF_UP),
// so a free VF left down is not judged; nor is a function whose port is
// already reported down (an IPoIB netdev's carrier is its port's state:
// one fault, one finding), nor a VF whose PF has no carrier. Only this
// netns's links are read: a VF in a pod is the monitor's.
func (r *run) checkCarrier() {
	if r.linkErr != nil {
		r.add(SeverityInfo, finding.CheckCarrier, "node", "run as root in the host network namespace",
			"carrier of host netdevs not checked: %v", r.linkErr)
		return
	}
	portDown := map[string]bool{}
	for _, f := range r.findings {
		if f.Check == finding.CheckPortState || f.Check == finding.CheckLinkLayer {
			portDown[f.Subject] = true
			for _, vf := range f.Covers {
				portDown[vf] = true
			}
		}
	}
	noCarrier := map[string]bool{} // PF address → a netdev without carrier
	judge := func(f *function) {
		if portDown[f.addr] || f.pf != "" && noCarrier[f.pf] {
			return
		}
		for _, l := range r.linksOf(f) {
			if l.up && !l.carrier {
				r.reportNoCarrier(f, l)
				noCarrier[f.addr] = true
				return
			}
		}
	}
	for _, f := range slices.Concat(r.inv.pfs, r.inv.otherPFs) {
		judge(f)
	}
	for _, f := range slices.Concat(r.inv.vfs, r.inv.otherVFs) {
		judge(f)
	}
}

// linksOf is a function's links in this netns: those sysfs lists under it
// and those whose parent device it is.
func (r *run) linksOf(f *function) []*hostLink {
	var out []*hostLink
	for _, name := range f.netdevs {
		if l := r.byName[name]; l != nil {
			out = append(out, l)
		}
	}
	for _, l := range r.byParent[f.addr] {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

func (r *run) reportNoCarrier(f *function, l *hostLink) {
	what, remedy := "PF", fmt.Sprintf("check the cable, transceiver and switch port of %s (ethtool %s", l.name, l.name)
	if f.vendor == VendorMellanox {
		remedy += ", mlxlink -d " + f.addr
	}
	remedy += ")"
	if f.pf != "" {
		what = "VF"
		remedy = fmt.Sprintf("its PF's link is up: check the VF's link state policy (ip link set <PF netdev> vf %d state auto) "+
			"and ip -d link show %s", f.index, l.name)
	}
	r.add(SeverityError, finding.CheckCarrier, f.addr, remedy,
		"%s %s netdev %s is up without carrier (operstate %s): no pod can use its link", what, f.addr, l.name, l.operState)
	r.coverVFs(f)
}
