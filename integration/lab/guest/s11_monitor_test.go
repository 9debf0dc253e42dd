//go:build labguest

package guest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil/agenttest"
)

const (
	// monitorListen is free: nothing else listens in the guest.
	monitorListen   = "127.0.0.1:9808"
	monitorInterval = 200 * time.Millisecond
	// portDownWithin bounds PF down → metric 1: the VF's carrier drops
	// within a few seconds under TCG, then one sweep.
	portDownWithin = 30 * time.Second
	// recoverWithin bounds PF up → metric 0: a VF regains carrier about
	// 3 s after its PF comes up on a quiet machine, longer under TCG.
	recoverWithin = 60 * time.Second
)

// TestLab11DriftMonitorPortDown: the drift monitor agent runs in the guest
// as the DaemonSet runs it, over the state dir of an attachment ADDed
// through libcni on a real VF. The PF goes down → the VF loses carrier →
// sriov_stable_attachment_drift{reason="port-down"} goes to 1 within a
// bounded time, the drift is logged once; the PF comes up → the series goes
// back to 0 and the recovery is logged once. Its doctor, run against the
// guest's real sysfs, reports no errors.
func TestLab11DriftMonitorPortDown(t *testing.T) {
	e := newEnv(t)
	pf := theLab.PFs[0]
	a := e.attach(newPod(t, "monitored"), pf.VFs[5], opts{})
	mustAdd(t, a)
	if err := waitCarrier(a.pod.Path(), a.vf, true, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	ag := startAgent(t, e)
	portDown := promtext.Series("sriov_stable_attachment_drift", "network", networkName, "reason", "port-down")
	ok := promtext.Series("sriov_stable_attachments", "network", networkName, "status", "ok")
	drifted := promtext.Series("sriov_stable_attachments", "network", networkName, "status", "drifted")
	events := promtext.Series("sriov_stable_drift_events_total", "network", networkName, "reason", "port-down")
	ag.waitFor(t, "the attachment counted ok, no port-down drift", 30*time.Second, func(m metrics) bool {
		return m.Is(ok, 1) && m.Is(portDown, 0)
	})
	// The doctor's first report may be published after the monitor's
	// first sweep: its findings by severity are there once it is.
	var m metrics
	ag.waitFor(t, "the doctor's first report", 30*time.Second, func(got metrics) bool {
		m = got
		_, found := got[promtext.Series("sriov_stable_doctor_findings", "severity", "error")]
		return found
	})
	if !m.Is("sriov_stable_doctor_up", 1) || !m.Is(promtext.Series("sriov_stable_doctor_findings", "severity", "error"), 0) {
		t.Fatalf("the agent's doctor on the guest's sysfs: doctor_up %v, error findings %v, want 1 and 0",
			m["sriov_stable_doctor_up"], m[promtext.Series("sriov_stable_doctor_findings", "severity", "error")])
	}

	setPF(t, pf, false)
	took := ag.waitFor(t, "port-down drift after the PF went down", portDownWithin, func(m metrics) bool {
		return m.Is(portDown, 1) && m.Is(drifted, 1)
	})
	t.Logf("PF %s down → %s = 1 after %s", pf.Link, portDown, took.Round(time.Millisecond))

	setPF(t, pf, true)
	took = ag.waitFor(t, "recovery after the PF came up", recoverWithin, func(m metrics) bool {
		return m.Is(portDown, 0) && m.Is(ok, 1)
	})
	t.Logf("PF %s up → %s = 0 after %s", pf.Link, portDown, took.Round(time.Millisecond))
	if m := ag.scrape(t); !m.Is(events, 1) {
		t.Fatalf("%s = %v, want 1 (one drift detected)", events, m[events])
	}
	log := ag.log(t)
	for _, msg := range []string{"drift detected", "drift recovered"} {
		if n := testutil.CountLines(log, msg, "reason=port-down", a.vf.PCI); n != 1 {
			t.Fatalf("agent logged %q for %s %d times, want once:\n%s", msg, a.vf.PCI, n, log)
		}
	}

	mustDel(t, a)
	wantRecords(t, e, 0)
	ag.waitFor(t, "the attachment gone from the metrics after DEL", 30*time.Second, func(m metrics) bool {
		return m[ok] == 0 && m[drifted] == 0
	})
}

// agent is sriov-stable-agent monitor running in the guest, through the
// shared harness.
type agent struct {
	*agenttest.Agent
}

// startAgent runs `sriov-stable-agent monitor` over the scenario's state
// dir, logging to agent.log in its artifacts, and stops it with SIGTERM at
// cleanup (it must exit 0 then, within 20s). Flags in extra come last (a
// later --interval wins).
func startAgent(t *testing.T, e *env, extra ...string) *agent {
	t.Helper()
	logFile, err := os.Create(filepath.Join(e.dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() }) // after the agent stopped: cleanups run last first
	args := append([]string{"monitor", "--state-dir", e.stateDir, "--interval", monitorInterval.String(),
		"--kmsg=", "--log-level", "info"}, extra...)
	return &agent{agenttest.Start(t, tool("sriov-stable-agent"), args, agenttest.Options{Listen: monitorListen, Output: logFile})}
}

// log is what the agent wrote so far.
func (a *agent) log(testing.TB) string { return a.Logs().String() }

func (a *agent) scrape(t testing.TB) metrics {
	t.Helper()
	return a.Scrape(t)
}

// waitFor polls /metrics until cond holds and returns how long that took.
func (a *agent) waitFor(t testing.TB, what string, timeout time.Duration, cond func(metrics) bool) time.Duration {
	t.Helper()
	_, took := a.WaitFor(t, what, timeout, cond)
	return took
}

type metrics = promtext.Metrics
