package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// checkPorts reports each port's link layer against the expectation and
// every port that is not ACTIVE/LinkUp. A VF's port follows its PF's: a VF
// is reported only when its PF's port is fine, so one unplugged cable is one
// finding, not nine.
func (r *run) checkPorts() {
	badLayer := map[string]bool{} // PF address → a port on the wrong link layer
	badState := map[string]bool{} // PF address → a port down
	for _, f := range slices.Concat(r.inv.pfs, r.inv.otherPFs) {
		f.rdmaPorts(func(d sysfs.RDMADevice, p sysfs.Port) {
			if r.checkLinkLayer(f, d, p) {
				badLayer[f.addr] = true
			}
			if r.checkPortState(f, d, p) {
				badState[f.addr] = true
			}
		})
	}
	for _, f := range slices.Concat(r.inv.vfs, r.inv.otherVFs) {
		f.rdmaPorts(func(d sysfs.RDMADevice, p sysfs.Port) {
			if !badLayer[f.pf] {
				r.checkLinkLayer(f, d, p)
			}
			if !badState[f.pf] {
				r.checkPortState(f, d, p)
			}
		})
	}
}

func (r *run) checkLinkLayer(f *function, d sysfs.RDMADevice, p sysfs.Port) bool {
	want := r.opts.LinkLayer
	if want == "" || want == config.LinkLayerAuto || strings.EqualFold(p.LinkLayer, want) {
		return false
	}
	linkType := map[string]int{config.LinkLayerInfiniBand: 1, config.LinkLayerEthernet: 2}[want]
	remedy := fmt.Sprintf("set the port type: mlxconfig -d %s set LINK_TYPE_P%d=%d (1 = InfiniBand, 2 = Ethernet; on a dual-port card "+
		"port 2 is LINK_TYPE_P2 on the card's first PF), then mlxfwreset -d %s reset or reboot", r.pfOf(f), p.Num, linkType, r.pfOf(f))
	if f.vendor != VendorMellanox {
		remedy = fmt.Sprintf("set port %d of %s to %s with its vendor's tool, then reset the card or reboot", p.Num, r.pfOf(f), want)
	}
	what := "port"
	if f.pf != "" {
		what = "VF port"
	}
	r.add(SeverityError, finding.CheckLinkLayer, f.addr, remedy,
		"%s %d of %s (%s) runs %s, %s expected%s", what, p.Num, d.Name, f.addr, p.LinkLayer, want, fallbackNote(want, p.LinkLayer))
	r.coverVFs(f)
	return true
}

func fallbackNote(want, got string) string {
	if want == config.LinkLayerInfiniBand && strings.EqualFold(got, "Ethernet") {
		return ": the card fell back to Ethernet (VPI port type set to ETH or auto-sensed)"
	}
	return ""
}

func (r *run) checkPortState(f *function, d sysfs.RDMADevice, p sysfs.Port) bool {
	if p.Active() {
		return false
	}
	// What shows the link's state: mlxlink on a Mellanox function, the
	// RDMA port itself elsewhere.
	probe := "mlxlink -d " + f.addr
	if f.vendor != VendorMellanox {
		probe = "ibstat " + d.Name
	}
	var remedy string
	switch {
	case f.pf != "" && p.PhysState.Num == sysfs.PhysLinkUp:
		remedy = fmt.Sprintf("the VF's vport is down while the link is up: set its policy to Follow "+
			"(ip link set <PF netdev> vf %d state auto, or echo Follow > /sys/bus/pci/devices/%s/sriov/%d/policy)", f.index, f.pf, f.index)
	case p.PhysState.Num == sysfs.PhysDisabled:
		remedy = "the port is administratively disabled: enable it on the switch or with ibportstate, and check " + probe
	case p.PhysState.Num == sysfs.PhysPolling || p.PhysState.Num == sysfs.PhysSleep:
		remedy = "no link partner: check the cable and transceiver (" + probe + ") and the switch port"
	case p.PhysState.Num == sysfs.PhysLinkUp && (p.State.Num == sysfs.PortInit || p.State.Num == sysfs.PortArmed):
		remedy = "the link is up but no subnet manager has brought the port to ACTIVE: check opensm/UFM and that this port is in its partition"
	default:
		remedy = "check ibstat / " + probe + ", the cable and the switch port"
		if f.vendor != VendorMellanox {
			remedy = "check " + probe + ", the cable and the switch port"
		}
	}
	what := "port"
	if f.pf != "" {
		what = "VF port"
	}
	r.add(SeverityError, finding.CheckPortState, f.addr, remedy, "%s %d of %s (%s) is %s (state %d), phys_state %s (%d); ACTIVE / LinkUp needed",
		what, p.Num, d.Name, f.addr, p.State.Name, p.State.Num, p.PhysState.Name, p.PhysState.Num)
	r.coverVFs(f)
	return true
}

// coverVFs says that the finding just added, about f's port, makes each of
// f's VFs unusable too when f is a PF.
func (r *run) coverVFs(f *function) {
	if f.pf != "" || len(f.vfs) == 0 {
		return
	}
	r.findings[len(r.findings)-1].Covers = slices.Sorted(maps.Values(f.vfs))
}

// pfOf is the PF a firmware setting has to be made on.
func (r *run) pfOf(f *function) string {
	if f.pf != "" {
		return f.pf
	}
	return f.addr
}
