//go:build labguest

package guest

import (
	"testing"
	"time"
)

// TestLab05PortDown: with the PF down every VF loses carrier. CHECK of a
// running attachment reports it; ADD under portPolicy=require fails with
// 103 once portWaitMs has passed, and the runtime's DEL returns the VF;
// portPolicy=warn lets ADD through. With the PF up again CHECK passes and
// ADD succeeds.
func TestLab05PortDown(t *testing.T) {
	e := newEnv(t)
	pf := theLab.PFs[0]
	running := e.attach(newPod(t, "running"), pf.VFs[5], opts{})
	mustAdd(t, running)
	if err := waitCarrier(running.pod.Path(), running.vf, true, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	setPF(t, pf, false)
	if err := waitCarrier(running.pod.Path(), running.vf, false, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "CHECK with the PF down", running.check(), 105, running.vf.PCI)

	const waitMs = 1500
	starting := e.attach(newPod(t, "starting"), pf.VFs[6], opts{plugin: map[string]any{"portPolicy": "require", "portWaitMs": waitMs}})
	start := time.Now()
	_, err := starting.add()
	took := time.Since(start)
	wantCode(t, "ADD with the PF down", err, 103, starting.vf.PCI)
	if took < waitMs*time.Millisecond || took > waitMs*time.Millisecond+20*time.Second {
		t.Fatalf("ADD failed after %s, want just over portWaitMs=%dms", took, waitMs)
	}
	t.Logf("ADD gave up after %s (portWaitMs=%d)", took.Round(time.Millisecond), waitMs)
	mustDel(t, starting) // a runtime DELs after a failed ADD
	wantRecords(t, e, 1)

	warned := e.attach(newPod(t, "warned"), pf.VFs[6], opts{plugin: map[string]any{"portPolicy": "warn", "portWaitMs": 200}})
	mustAdd(t, warned)
	mustDel(t, warned)

	setPF(t, pf, true)
	if err := poll(30*time.Second, running.check); err != nil {
		t.Fatalf("CHECK still fails after the PF came back up: %v", err)
	}
	// The first link up of a VF after its PF came back takes seconds under TCG.
	restarted := e.attach(newPod(t, "restarted"), pf.VFs[6], opts{plugin: map[string]any{"portPolicy": "require", "portWaitMs": 30000}})
	mustAdd(t, restarted)
	mustCheck(t, restarted)
	mustDel(t, restarted)
	mustDel(t, running)
	wantRecords(t, e, 0)
}

// setPF sets a PF's link up or down. Equivalent to: ip link set $pf up|down
func setPF(t testing.TB, p pf, up bool) {
	t.Helper()
	if err := setLinkUp(rootNetns, p.Link, up); err != nil {
		t.Fatalf("PF %s up=%v: %v", p.Link, up, err)
	}
}
