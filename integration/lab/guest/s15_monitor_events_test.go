//go:build labguest

package guest

import (
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
)

// seenWithin is issue 18's bound on a change in a pod to the agent's
// knowing it (its drift counted on /metrics), here under TCG on a shared
// CPU.
const seenWithin = time.Second

// TestLab15MonitorSeesAndRepairsRename: the agent runs with
// --repair=altname,name and a sweep interval of an hour, so only its
// events can see anything after its first sweep. A real VF renamed in its
// pod is seen within a second and renamed back to its ifname (its link
// goes down and up for that, and its carrier returns); its altname removed
// is added back. One netlink socket follows the attachment and closes when
// DEL removes the record.
func TestLab15MonitorSeesAndRepairsRename(t *testing.T) {
	e := newEnv(t)
	v := theLab.PFs[0].VFs[4]
	a := e.attach(newPod(t, "events"), v, opts{})
	mustAdd(t, a)
	if err := waitCarrier(a.pod.Path(), v, true, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, e, "--interval", "1h", "--repair", "altname,name")
	ok := promtext.Series("sriov_stable_attachments", "network", networkName, "status", "ok")
	ag.waitFor(t, "the attachment ok, one socket", 30*time.Second, func(m metrics) bool {
		return m.Is(ok, 1) && m.Is("sriov_stable_event_subscriptions", 1)
	})

	l, err := linkByParent(a.pod.Path(), v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	// The rename takes the VF down and up again, which igbvf does slowly
	// under TCG: the bound is from the moment the rename is done.
	start := time.Now()
	if err := renameLink(a.pod.Path(), l, "rogue0"); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	repairs := func(kind string) string { return promtext.Series("sriov_stable_repairs_total", "kind", kind) }
	renamed := promtext.Series("sriov_stable_drift_events_total", "network", networkName, "reason", "renamed")
	// Polled on /metrics: each figure is an upper bound of when the agent
	// knew, by at most one scrape.
	ag.waitFor(t, "the rename seen", 30*time.Second, func(m metrics) bool { return m.Is(renamed, 1) })
	seen := time.Since(done)
	ag.waitFor(t, "the rename repaired", 30*time.Second, func(m metrics) bool { return m.Is(repairs("name"), 1) })
	repaired := time.Since(done)
	t.Logf("%s renamed to rogue0 in its pod (down, rename, up took %s): seen within %s of the rename being done, renamed back within %s",
		v, done.Sub(start).Round(time.Millisecond), seen.Round(time.Millisecond), repaired.Round(time.Millisecond))
	if seen > seenWithin {
		t.Errorf("the rename was seen %s after it was done, want within %s", seen, seenWithin)
	}
	if l, err := linkByParent(a.pod.Path(), v.PCI); err != nil || l.Attrs().Name != ifName || l.Attrs().Flags&1 == 0 {
		t.Fatalf("after the repair the VF is %v (%v), want %s and up", l, err, ifName)
	}
	if err := waitCarrier(a.pod.Path(), v, true, recoverWithin); err != nil {
		t.Fatalf("the VF's carrier after the repair: %v", err)
	}
	ag.waitFor(t, "the attachment ok again", recoverWithin, func(m metrics) bool { return m.Is(ok, 1) })

	l, err = linkByParent(a.pod.Path(), v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := delAltNames(a.pod.Path(), l, []string{altNameOf(v)}); err != nil {
		t.Fatal(err)
	}
	ag.waitFor(t, "the altname repaired", 30*time.Second, func(m metrics) bool { return m.Is(repairs("altname"), 1) && m.Is(ok, 1) })
	t.Logf("%s's altname removed: added back within %s", v, time.Since(start).Round(time.Millisecond))
	if l, err := linkByParent(a.pod.Path(), v.PCI); err != nil || !hasAltName(l, altNameOf(v)) {
		t.Fatalf("after the repair the VF is %v (%v), want altname %s", l, err, altNameOf(v))
	}
	if m := ag.scrape(t); !m.Is("sriov_stable_sweeps_total", 1) {
		t.Errorf("%v sweeps with an hour's interval: want the first only, the rest seen by events", m["sriov_stable_sweeps_total"])
	}

	mustDel(t, a)
	wantRecords(t, e, 0)
	ag.waitFor(t, "the socket closed after DEL", 30*time.Second, func(m metrics) bool {
		return m.Is("sriov_stable_event_subscriptions", 0) && m[ok] == 0
	})
}
