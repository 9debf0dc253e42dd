// Package agenttest runs sriov-stable-agent as a process, for the suites
// that test it whole: the monitor's namespace tests, the bench and the lab
// guest. One way to start it, to know it is ready (/readyz), to read it
// (/metrics), to wait on what it serves and to stop it as the kubelet does
// (SIGTERM, then a bounded wait).
package agenttest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

// TB is what the harness needs of a test: testing.TB fits, and so does the
// bench's.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Options says how the agent runs beside its command line.
type Options struct {
	// Listen is the agent's --listen address (host:port); Start passes it.
	Listen string
	// Caps, when set, are the only capabilities the agent keeps (setpriv's
	// names, e.g. sys_admin): the DaemonSet's, to prove they are enough.
	Caps []string
	// Output also receives everything the agent writes (a log file, a line
	// reader); the harness keeps its own copy for Log.
	Output io.Writer
	// ReadyTimeout bounds the wait for /readyz (default 60s), StopTimeout
	// the wait for exit after SIGTERM (default 20s).
	ReadyTimeout, StopTimeout time.Duration
}

// Agent is one running agent.
type Agent struct {
	cmd    *exec.Cmd
	url    string
	logs   *testutil.LogBuffer
	exited chan error
	stop   time.Duration
	// done is set once the agent's exit (exit) has been received; stopped
	// once Stop asked for it or reported it.
	done, stopped bool
	exit          error
}

// Start runs bin with args (the subcommand first, e.g. "monitor") and
// --listen, waits until /readyz answers 200 and returns the agent; at
// cleanup it is stopped (SIGTERM; an exit other than 0, or none within
// StopTimeout, fails the test) and, when the test failed, its log shown.
// The agent is killed if the caller's thread ends first (PR_SET_PDEATHSIG):
// it holds sockets in the test's namespaces and must not outlive it.
func Start(tb TB, bin string, args []string, o Options) *Agent {
	tb.Helper()
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 20 * time.Second
	}
	a := &Agent{url: "http://" + o.Listen, logs: &testutil.LogBuffer{}, exited: make(chan error, 1), stop: o.StopTimeout}
	argv := append([]string{bin}, args...)
	argv = append(argv, "--listen", o.Listen)
	if len(o.Caps) > 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			tb.Fatalf("run the agent with only %v: setpriv (util-linux): %v", o.Caps, err)
		}
		// setpriv execs the agent: the process is the agent's.
		argv = append([]string{setpriv, "--bounding-set=-all,+" + strings.Join(o.Caps, ",+"), "--inh-caps=-all", "--"}, argv...)
	}
	a.cmd = exec.Command(argv[0], argv[1:]...)
	var out io.Writer = a.logs
	if o.Output != nil {
		out = io.MultiWriter(a.logs, o.Output)
	}
	a.cmd.Stdout, a.cmd.Stderr = out, out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that started the
		// agent: that thread is kept, locked and waiting, for the agent's
		// lifetime.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := a.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		a.exited <- a.cmd.Wait()
	}()
	if err := <-started; err != nil {
		tb.Fatalf("start the agent: %v", err)
	}
	tb.Cleanup(func() {
		if err := a.Stop(); err != nil {
			fail(tb, "%v", err)
		}
		if f, ok := tb.(interface{ Failed() bool }); ok && f.Failed() {
			tb.Logf("agent log:\n%s", a.logs)
		}
	})
	start := time.Now()
	deadline := start.Add(o.ReadyTimeout)
	for {
		if err := a.exitedErr(); err != nil {
			tb.Fatalf("the agent exited before it was ready: %v\n%s", err, a.logs)
		}
		code, body, err := a.Get("/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the agent not ready within %s: /readyz %d %q %v\n%s", o.ReadyTimeout, code, body, err, a.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Logf("agent ready after %s", time.Since(start).Round(time.Millisecond))
	return a
}

// fail marks the test failed and goes on where the test can (Errorf), else
// ends it.
func fail(tb TB, format string, args ...any) {
	if e, ok := tb.(interface{ Errorf(string, ...any) }); ok {
		e.Errorf(format, args...)
		return
	}
	tb.Fatalf(format, args...)
}

// exitedErr reports an exit of the agent without waiting: nil while it
// runs.
func (a *Agent) exitedErr() error {
	if !a.done {
		select {
		case a.exit = <-a.exited:
			a.done = true
		default:
			return nil
		}
	}
	return fmt.Errorf("exit status: %v", a.exit)
}

// Pid is the agent's process ID.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// Logs is everything the agent wrote so far.
func (a *Agent) Logs() *testutil.LogBuffer { return a.logs }

// Stop sends SIGTERM, as the kubelet does, and waits StopTimeout for the
// agent to exit; it is killed after that. The error says how it did not
// exit 0 in time. Stopping a stopped agent does nothing.
func (a *Agent) Stop() error {
	_, err := a.StopWithin(a.stop)
	return err
}

// StopWithin is Stop with its own limit; it returns how long the exit took.
func (a *Agent) StopWithin(limit time.Duration) (time.Duration, error) {
	if a.stopped {
		return 0, nil
	}
	a.stopped = true
	if a.done {
		return 0, fmt.Errorf("the agent exited before it was stopped (%v)\n%s", a.exit, a.logs)
	}
	start := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case a.exit = <-a.exited:
		a.done = true
		if a.exit != nil {
			return time.Since(start), fmt.Errorf("the agent exited with %v after SIGTERM\n%s", a.exit, a.logs)
		}
		return time.Since(start), nil
	case <-time.After(limit):
		_ = a.cmd.Process.Kill()
		a.exit, a.done = <-a.exited, true
		return time.Since(start), fmt.Errorf("the agent did not stop within %s of SIGTERM\n%s", limit, a.logs)
	}
}

// Get fetches path from the agent's listener, within 5 seconds.
func (a *Agent) Get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+path, nil)
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

// URL is the agent's base URL (http://listen).
func (a *Agent) URL() string { return a.url }

// Scrape reads /metrics once; a failed scrape ends the test.
func (a *Agent) Scrape(tb TB) promtext.Metrics {
	tb.Helper()
	code, body, err := a.Get("/metrics")
	if err != nil || code != http.StatusOK {
		tb.Fatalf("GET /metrics: %d %v %s", code, err, body)
	}
	return promtext.Parse(body)
}

// Poll scrapes /metrics every 20 ms until cond holds, and returns that
// scrape and true, or the last scrape and false once timeout has passed.
// The agent exiting meanwhile ends the test.
func (a *Agent) Poll(tb TB, timeout time.Duration, cond func(promtext.Metrics) bool) (promtext.Metrics, bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last promtext.Metrics
	for {
		if code, body, err := a.Get("/metrics"); err == nil && code == http.StatusOK {
			last = promtext.Parse(body)
			if cond(last) {
				return last, true
			}
		}
		if err := a.exitedErr(); err != nil {
			tb.Fatalf("the agent is gone (%v):\n%s", err, a.logs)
		}
		if time.Now().After(deadline) {
			return last, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor is Poll that ends the test on timeout, naming what it waited
// for, with the last sriov_stable_* series and the agent's log; it returns
// the scrape that met cond and how long the wait took.
func (a *Agent) WaitFor(tb TB, what string, timeout time.Duration, cond func(promtext.Metrics) bool) (promtext.Metrics, time.Duration) {
	tb.Helper()
	start := time.Now()
	m, ok := a.Poll(tb, timeout, cond)
	if !ok {
		tb.Fatalf("waited %s for %s; last sriov_stable_* series:\n%s\nagent log:\n%s", timeout, what, m.Dump("sriov_stable_"), a.logs)
	}
	return m, time.Since(start)
}
