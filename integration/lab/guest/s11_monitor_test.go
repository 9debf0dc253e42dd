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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	portDown := series("sriov_stable_attachment_drift", "network", networkName, "reason", "port-down")
	ok := series("sriov_stable_attachments", "network", networkName, "status", "ok")
	drifted := series("sriov_stable_attachments", "network", networkName, "status", "drifted")
	events := series("sriov_stable_drift_events_total", "network", networkName, "reason", "port-down")
	ag.waitFor(t, "the attachment counted ok, no port-down drift", 30*time.Second, func(m metrics) bool {
		return m.is(ok, 1) && m.is(portDown, 0)
	})
	m := ag.scrape(t)
	for _, s := range []string{"sriov_stable_doctor_up", series("sriov_stable_doctor_findings", "severity", "error")} {
		if _, found := m[s]; !found {
			t.Fatalf("/metrics lacks %s", s)
		}
	}
	if !m.is("sriov_stable_doctor_up", 1) || !m.is(series("sriov_stable_doctor_findings", "severity", "error"), 0) {
		t.Fatalf("the agent's doctor on the guest's sysfs: doctor_up %v, error findings %v, want 1 and 0",
			m["sriov_stable_doctor_up"], m[series("sriov_stable_doctor_findings", "severity", "error")])
	}

	setPF(t, pf, false)
	took := ag.waitFor(t, "port-down drift after the PF went down", portDownWithin, func(m metrics) bool {
		return m.is(portDown, 1) && m.is(drifted, 1)
	})
	t.Logf("PF %s down → %s = 1 after %s", pf.Link, portDown, took.Round(time.Millisecond))

	setPF(t, pf, true)
	took = ag.waitFor(t, "recovery after the PF came up", recoverWithin, func(m metrics) bool {
		return m.is(portDown, 0) && m.is(ok, 1)
	})
	t.Logf("PF %s up → %s = 0 after %s", pf.Link, portDown, took.Round(time.Millisecond))
	if m := ag.scrape(t); !m.is(events, 1) {
		t.Fatalf("%s = %v, want 1 (one drift detected)", events, m[events])
	}
	log := ag.log(t)
	for _, msg := range []string{"drift detected", "drift recovered"} {
		if n := countLines(log, msg, "reason=port-down", a.vf.PCI); n != 1 {
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
// cleanup (it must exit 0 then).
func startAgent(t *testing.T, e *env) *agent {
	t.Helper()
	a := &agent{logPath: filepath.Join(e.dir, "agent.log")}
	logFile, err := os.Create(a.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool("sriov-stable-agent"), "monitor",
		"--state-dir", e.stateDir, "--interval", monitorInterval.String(),
		"--listen", monitorListen, "--kmsg=", "--log-level", "info")
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
	return parseMetrics(body)
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
		last = parseMetrics(body)
		if !cond(last) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v; last sriov_stable_* series:\n%s\nagent log:\n%s",
			timeout, what, err, last.ours(), a.log(t))
	}
	return time.Since(start)
}

// metrics maps series (name{label="value",…}, labels sorted by name as the
// text format prints them) to values.
type metrics map[string]float64

func parseMetrics(text string) metrics {
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// is tells whether a series is present with value v.
func (m metrics) is(s string, v float64) bool {
	got, ok := m[s]
	return ok && got == v
}

// ours lists the sriov_stable_* series, sorted, for failure messages.
func (m metrics) ours() string {
	var out []string
	for s, v := range m {
		if strings.HasPrefix(s, "sriov_stable_") {
			out = append(out, fmt.Sprintf("  %s %v", s, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// series formats name{k="v",…} with the labels sorted by name.
func series(name string, kv ...string) string {
	var pairs []string
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// countLines counts the lines of text that contain every one of parts.
func countLines(text string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}
