package monitor

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// healthz answers GET /healthz from the monitor's handler.
func healthz(t *testing.T, f *fixture) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// A port-state read that never returns stalls its VF alone: every other
// attachment is still checked, by the sweeps and at once by events;
// /healthz stays 200 and names the VF; Run returns at once when its
// context ends, with the read still blocked. Both ways a read can hang
// are tried: in read(2), and in open(2), which the poller does when it
// first subscribes (the sweep used to wait for it, holding the reconcile
// lock, and so never got to any check).
func TestStuckPortReadStallsOnlyItsVF(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writer bool
	}{
		{"read blocks", true},
		{"open blocks", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, Config{Interval: 300 * time.Millisecond, CheckTimeout: 100 * time.Millisecond,
				PollInterval: 50 * time.Millisecond}, 4)
			stuck := n.pods[1] // an RDMA VF
			safefiletest.FIFOAt(t, filepath.Join(n.sys.RDMAPath(stuck.rec.PCI, stuck.rec.RDMA[0]), "ports", "1", "state"), tc.writer)
			stop := n.start()

			n.waitFor("the other three attachments checked and ok", 5*time.Second, func() bool {
				v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
				return v == 3
			})
			var body string
			n.waitFor("/healthz naming the stuck VF", 5*time.Second, func() bool {
				var code int
				code, body = healthz(t, n.f)
				return code == http.StatusOK && strings.HasPrefix(body, "ok\n") &&
					(strings.Contains(body, "\nstuck: VF "+stuck.rec.PCI+" ") || strings.Contains(body, "\nunchecked: VF "+stuck.rec.PCI+" "))
			})
			t.Logf("/healthz:\n%s", body)

			// Events still work for the others, and sweeps go on.
			sweeps, _ := n.f.value(t, "sriov_stable_sweeps_total")
			n.pods[0].in(t, "net1", rename("eth9"))
			took := n.waitFor("a rename in another pod seen", 5*time.Second, func() bool { return n.driftOf(drift.Renamed) == 1 })
			if took > eventBound {
				t.Errorf("a rename beside the stuck VF seen after %s, want within %s", took, eventBound)
			}
			n.waitFor("two more sweeps", 5*time.Second, func() bool {
				v, _ := n.f.value(t, "sriov_stable_sweeps_total")
				return v >= sweeps+2
			})
			if err := n.f.mon.Health(); err != nil {
				t.Errorf("unhealthy beside one stuck VF: %v", err)
			}

			start := time.Now()
			stop()
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Run returned %s after its context ended, with a read blocked; want at once", took)
			}
		})
	}
}

// Stuck lists every VF whose last check failed, in PCI order, naming its
// attachment and the error.
func TestStuckListsFailingVFs(t *testing.T) {
	f := newFixture(t, Config{CheckTimeout: 100 * time.Millisecond, Interval: time.Second})
	now := time.Now()
	var recs []*state.Record
	var outcomes []outcome
	for i := range 30 {
		rec := record("ib-a", fmt.Sprintf("c%02d", 29-i), "/run/netns/pod")
		rec.PCI = testutil.VFAddr(29 - i)
		recs, outcomes = append(recs, rec), append(outcomes, outcome{err: fmt.Errorf("boom %d", 29-i)})
	}
	f.mon.apply(recs, outcomes, now)
	lines := f.mon.Stuck(now)
	if len(lines) != 30 {
		t.Fatalf("Stuck() has %d lines, want 30: %q", len(lines), lines)
	}
	for i, l := range lines {
		want := fmt.Sprintf("unchecked: VF %s (network ib-a, container c%02d, ifname net1, netns /run/netns/pod): boom %d", testutil.VFAddr(i), i, i)
		if l != want {
			t.Errorf("Stuck()[%d] = %q, want %q", i, l, want)
		}
	}
}
