//go:build labguest

package guest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
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
	m := ag.scrape(t)
	for _, s := range []string{"sriov_stable_doctor_up", promtext.Series("sriov_stable_doctor_findings", "severity", "error")} {
		if _, found := m[s]; !found {
			t.Fatalf("/metrics lacks %s", s)
		}
	}
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

// agent is sriov-stable-agent monitor running in the guest.
type agent struct {
	logPath string
}

// startAgent runs `sriov-stable-agent monitor` over the scenario's state
// dir, logging to agent.log in its artifacts, and stops it with SIGTERM at
// cleanup (it must exit 0 then). Flags in extra come last (a later
// --interval wins).
func startAgent(t *testing.T, e *env, extra ...string) *agent {
	t.Helper()
	a := &agent{logPath: filepath.Join(e.dir, "agent.log")}
	logFile, err := os.Create(a.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool("sriov-stable-agent"), append([]string{"monitor",
		"--state-dir", e.stateDir, "--interval", monitorInterval.String(),
		"--listen", monitorListen, "--kmsg=", "--log-level", "info"}, extra...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		defer logFile.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("agent exited with %v after SIGTERM", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("agent did not stop within 20s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", a.log(t))
		}
	})
	start := time.Now()
	if err := poll(60*time.Second, func() error {
		select {
		case err := <-exited:
			return fmt.Errorf("agent exited: %v", err)
		default:
		}
		code, body, err := get("/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz: %d %s", code, body)
		}
		return err
	}); err != nil {
		t.Fatalf("agent not ready: %v\n%s", err, a.log(t))
	}
	t.Logf("agent ready after %s", time.Since(start).Round(time.Millisecond))
	return a
}

func (a *agent) log(t testing.TB) string {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		t.Errorf("read the agent's log: %v", err)
	}
	return string(b)
}

// get fetches a path from the agent's HTTP listener.
func get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+monitorListen+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (a *agent) scrape(t testing.TB) metrics {
	t.Helper()
	code, body, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v %s", code, err, body)
	}
	return promtext.Parse(body)
}

// waitFor polls /metrics until cond holds and returns how long that took.
func (a *agent) waitFor(t testing.TB, what string, timeout time.Duration, cond func(metrics) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var last metrics
	err := poll(timeout, func() error {
		code, body, err := get("/metrics")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("GET /metrics: %d %v", code, err)
		}
		last = promtext.Parse(body)
		if !cond(last) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v; last sriov_stable_* series:\n%s\nagent log:\n%s",
			timeout, what, err, last.Dump("sriov_stable_"), a.log(t))
	}
	return time.Since(start)
}

type metrics = promtext.Metrics
