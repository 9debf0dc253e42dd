package doctor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

// checkCarrier (carrier) reports each function whose host netdev is up
// without carrier: on Ethernet (RoCE) the PF's cable or switch port, on a
// VF its link state policy or the PF's link. A netdev that is down says
// nothing about its carrier (the kernel knows none for it), so a free VF
// left down is not judged; nor is a function whose port is already
// reported down (an IPoIB netdev's carrier is its port's state: one
// fault, one finding), nor a VF whose PF has no carrier. The state is
// sysfs's (net/<netdev>/flags and carrier), which describes the netns
// sysfs was mounted in, the host's, wherever the doctor runs: the agent's
// own pod netns has none of the host's links. A VF in a pod is the
// monitor's.
func (r *run) checkCarrier() {
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
	var unread []string
	var firstErr error
	judge := func(f *function) {
		if portDown[f.addr] || f.pf != "" && noCarrier[f.pf] {
			return
		}
		for _, name := range f.netdevs {
			st, err := r.sys.NetdevState(f.addr, name)
			if err != nil {
				unread = append(unread, name)
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			if st.Up && !st.Carrier {
				r.reportNoCarrier(f, name, st.OperState)
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
	if len(unread) > 0 {
		r.add(SeverityInfo, finding.CheckCarrier, "node", "check that sysfs is the host's and readable (net/<netdev>/flags and carrier)",
			"carrier of %d host netdevs not checked (%s): %v", len(unread), truncate(strings.Join(unread, ", "), 120), firstErr)
	}
}

func (r *run) reportNoCarrier(f *function, name, operState string) {
	what, remedy := "PF", fmt.Sprintf("check the cable, transceiver and switch port of %s (ethtool %s", name, name)
	if f.vendor == VendorMellanox {
		remedy += ", mlxlink -d " + f.addr
	}
	remedy += ")"
	if f.pf != "" {
		what = "VF"
		remedy = fmt.Sprintf("its PF's link is up: check the VF's link state policy (ip link set <PF netdev> vf %d state auto) "+
			"and ip -d link show %s", f.index, name)
	}
	r.add(SeverityError, finding.CheckCarrier, f.addr, remedy,
		"%s %s netdev %s is up without carrier (operstate %s): no pod can use its link", what, f.addr, name, operState)
	r.coverVFs(f)
}
