//go:build labguest

package guest

import (
	"slices"
	"testing"
	"time"
)

// TestLab00Infrastructure proves the lab itself before any scenario leans
// on it: every PF has its VFs, each VF is a netdev with a PCI parent that
// gets carrier when set up (the log shows how fast), and the upstream host-device plugin alone moves
// a VF by pciBusID into a pod and back through libcni.
func TestLab00Infrastructure(t *testing.T) {
	e := newEnv(t)
	for _, p := range theLab.PFs {
		if len(p.VFs) != *numVFs {
			t.Fatalf("PF %s has %d VFs, want %d", p.PCI, len(p.VFs), *numVFs)
		}
		for _, v := range p.VFs {
			t.Logf("PF %s %s vf %d: %s mac %s", p.PCI, p.Link, v.Index, v, v.MAC)
		}
	}
	logCarrierLatency(t, "first time after VF creation", theLab.firstCarrier)
	again, err := warmUp(theLab.allVFs())
	if err != nil {
		t.Fatal(err)
	}
	logCarrierLatency(t, "every later time", again)

	v := theLab.PFs[0].VFs[0]
	p := newPod(t, "infra")
	list, err := confList(map[string]any{
		"cniVersion": cniVersion,
		"name":       "host-device-only",
		"plugins":    []any{map[string]any{"type": "host-device", "pciBusID": v.PCI}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &attachment{e: e, pod: p, vf: v, list: list}
	t.Cleanup(a.delIfStillInPod)
	if _, err := a.add(); err != nil {
		t.Fatalf("host-device ADD of %s: %v", v, err)
	}
	l, err := linkByParent(p.Path(), v.PCI)
	if err != nil {
		t.Fatalf("host-device did not move %s into the pod: %v", v, err)
	}
	if l.Attrs().Name != ifName {
		t.Fatalf("host-device named %s %q in the pod, want %q", v, l.Attrs().Name, ifName)
	}
	mustDel(t, a)
}

// logCarrierLatency logs how long VFs took from link up to carrier.
func logCarrierLatency(t *testing.T, what string, took []time.Duration) {
	t.Helper()
	if len(took) == 0 {
		t.Fatalf("%s: no VF measured", what)
	}
	t.Logf("%s, link up to carrier: min %s, max %s", what,
		slices.Min(took).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond))
}
