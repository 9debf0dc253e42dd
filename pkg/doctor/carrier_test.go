package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// linkState is a fixture netdev's state as sysfs shows it.
type linkState struct{ up, carrier bool }

// TestCarrier: a PF up without carrier is one finding covering its VFs
// (its VF without carrier is not a second one); a free VF up without
// carrier under a fine PF is its own; a netdev that is down, or up with
// carrier, is not judged or is fine; a function whose port is already
// reported down is not reported again for its carrier; a netdev whose
// state cannot be read is said, once, as info. Ports finds the same
// carrier findings as Run, and WithPorts replaces the full run's.
func TestCarrier(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf0, pf1, pf2 := n.PFs[0], n.PFs[1], n.PFs[2]
	n.SetPort(pf2.PCI, pf2.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "2: Polling", GID0: sysfstest.GID0(pf2.NodeGUID)})
	links := map[sysfstest.DGXVF]linkState{
		{PCI: pf0.PCI, NetDev: pf0.NetDev}: {up: true},                // the PF's cable: one finding, its VFs covered
		pf0.VFs[0]:                         {up: true},                // under that PF: not a second finding
		{PCI: pf1.PCI, NetDev: pf1.NetDev}: {up: true, carrier: true}, // fine
		pf1.VFs[1]:                         {up: true},                // a free VF without carrier
		pf1.VFs[2]:                         {up: true, carrier: true}, // fine
		pf1.VFs[3]:                         {carrier: true},           // down: its carrier is unknowable
		{PCI: pf2.PCI, NetDev: pf2.NetDev}: {up: true},                // its port is DOWN: port-state says it
	}
	for l, st := range links {
		n.SetLinkState(l.PCI, l.NetDev, st.up, st.carrier)
	}
	rep, err := Run(Options{SysfsRoot: n.Root})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := Ports(Options{SysfsRoot: n.Root})
	if err != nil {
		t.Fatal(err)
	}
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
	wantMsg := "VF " + pf1.VFs[1].PCI + " netdev " + pf1.VFs[1].NetDev + " is up without carrier (operstate down): no pod can use its link"
	for _, f := range rep.Findings {
		if f.Check == finding.CheckCarrier && f.Subject == pf1.VFs[1].PCI && f.Message != wantMsg {
			t.Errorf("message %q, want %q", f.Message, wantMsg)
		}
	}

	// The carrier comes back: the port report, run later, clears the full
	// run's findings.
	n.SetLinkState(pf0.PCI, pf0.NetDev, true, true)
	n.SetLinkState(pf0.VFs[0].PCI, pf0.VFs[0].NetDev, false, false)
	n.SetLinkState(pf1.VFs[1].PCI, pf1.VFs[1].NetDev, true, true)
	if ports, err = Ports(Options{SysfsRoot: n.Root}); err != nil {
		t.Fatal(err)
	}
	if got := carrier(rep.WithPorts(ports.Started.Add(-1), ports).Findings); len(got) != 0 {
		t.Errorf("carrier findings left once every carrier is back: %v", got)
	}

	// A netdev whose flags cannot be read is one info finding about the
	// node, naming it.
	vf := pf1.VFs[2]
	if err := os.Remove(filepath.Join(n.DevicePath(vf.PCI), "net", vf.NetDev, "flags")); err != nil {
		t.Fatal(err)
	}
	if ports, err = Ports(Options{SysfsRoot: n.Root}); err != nil {
		t.Fatal(err)
	}
	want = []string{"info node covers 0"}
	if diff := cmp.Diff(want, carrier(ports.Findings)); diff != "" {
		t.Errorf("carrier findings with %s's flags gone (-want +got):\n%s", vf.NetDev, diff)
	}
	for _, f := range ports.Findings {
		if f.Check == finding.CheckCarrier && f.Subject == "node" && !strings.Contains(f.Message, "carrier of 1 host netdevs not checked ("+vf.NetDev+")") {
			t.Errorf("info %q does not name %s", f.Message, vf.NetDev)
		}
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
