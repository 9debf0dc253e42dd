package doctor

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// withLinkStates runs fn in a private netns holding a stand-in per entry,
// named as the fixture's host netdev, in the state given.
func withLinkStates(t *testing.T, links map[string]standIn, fn func()) {
	t.Helper()
	requireRoot(t)
	if err := withStandIns(links, fn); err != nil {
		t.Fatal(err)
	}
}

// TestCarrier: a PF up without carrier is one finding covering its VFs
// (its VF without carrier is not a second one); a free VF up without
// carrier under a fine PF is its own; a netdev that is down, or up with
// carrier, is not judged or is fine; a function whose port is already
// reported down is not reported again for its carrier. Ports finds the
// same carrier findings as Run, and WithPorts replaces the full run's.
func TestCarrier(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf0, pf1, pf2 := n.PFs[0], n.PFs[1], n.PFs[2]
	n.SetPort(pf2.PCI, pf2.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "2: Polling", GID0: sysfstest.GID0(pf2.NodeGUID)})
	links := map[string]standIn{
		pf0.NetDev:        {up: true},               // the PF's cable: one finding, its VFs covered
		pf0.VFs[0].NetDev: {up: true},               // under that PF: not a second finding
		pf1.NetDev:        {up: true, peerUp: true}, // fine
		pf1.VFs[1].NetDev: {up: true},               // a free VF without carrier
		pf1.VFs[2].NetDev: {up: true, peerUp: true}, // fine
		pf1.VFs[3].NetDev: {peerUp: true},           // down: its carrier is unknowable
		pf2.NetDev:        {up: true},               // its port is DOWN: port-state says it
	}
	var rep *Report
	var ports *PortReport
	withLinkStates(t, links, func() {
		var err error
		if rep, err = Run(Options{SysfsRoot: n.Root}); err != nil {
			t.Fatal(err)
		}
		if ports, err = Ports(Options{SysfsRoot: n.Root}); err != nil {
			t.Fatal(err)
		}
	})
	carrier := func(fs []Finding) (out []string) {
		for _, f := range fs {
			if f.Check == finding.CheckCarrier {
				out = append(out, fmt.Sprintf("%s %s covers %d", f.Severity, f.Subject, len(f.Covers)))
			}
		}
		return out
	}
	want := []string{
		fmt.Sprintf("error %s covers %d", pf0.PCI, len(pf0.VFs)),
		fmt.Sprintf("error %s covers 0", pf1.VFs[1].PCI),
	}
	if diff := cmp.Diff(want, carrier(rep.Findings)); diff != "" {
		t.Errorf("Run's carrier findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	if diff := cmp.Diff(want, carrier(ports.Findings)); diff != "" {
		t.Errorf("Ports' carrier findings (-want +got):\n%s", diff)
	}
	if !hasFinding(rep, finding.CheckPortState, pf2.PCI) || hasFinding(rep, finding.CheckCarrier, pf2.PCI) {
		t.Errorf("PF %s with its port DOWN: want its port-state finding alone\n%s", pf2.PCI, text(t, rep))
	}
	// A veth whose peer is down is LOWERLAYERDOWN.
	wantMsg := "VF " + pf1.VFs[1].PCI + " netdev " + pf1.VFs[1].NetDev + " is up without carrier (operstate lower-layer-down): no pod can use its link"
	for _, f := range rep.Findings {
		if f.Check == finding.CheckCarrier && f.Subject == pf1.VFs[1].PCI && f.Message != wantMsg {
			t.Errorf("message %q, want %q", f.Message, wantMsg)
		}
	}

	// The carrier comes back: the port report, run later, clears the full
	// run's findings.
	delete(links, pf0.VFs[0].NetDev)
	links[pf0.NetDev] = standIn{up: true, peerUp: true}
	links[pf1.VFs[1].NetDev] = standIn{up: true, peerUp: true}
	withLinkStates(t, links, func() {
		var err error
		if ports, err = Ports(Options{SysfsRoot: n.Root}); err != nil {
			t.Fatal(err)
		}
	})
	if got := carrier(rep.WithPorts(ports.Started.Add(-1), ports).Findings); len(got) != 0 {
		t.Errorf("carrier findings left once every carrier is back: %v", got)
	}
}

func hasFinding(rep *Report, check, subject string) bool {
	for _, f := range rep.Findings {
		if f.Check == check && f.Subject == subject {
			return true
		}
	}
	return false
}
