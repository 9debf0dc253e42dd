package nodecheck

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// recorder is a Notifier that keeps the reports it heard.
type recorder struct {
	mu      sync.Mutex
	reports int
	last    *doctor.Report
}

func (r *recorder) Doctor(rep *doctor.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports++
	r.last = rep
}

func (r *recorder) lastReport() (*doctor.Report, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.reports
}

func newChecker(t *testing.T, cfg Config) (*Checker, *recorder, *testutil.LogBuffer) {
	t.Helper()
	rec, logs := &recorder{}, &testutil.LogBuffer{}
	cfg.Notifiers = append(cfg.Notifiers, rec)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, rec, logs
}

// run runs c until the test ends, and waits for Run to return then.
func run(t *testing.T, c *Checker) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// hasFinding reports whether rep has an error of check about subject.
func hasFinding(rep *doctor.Report, check, subject string) bool {
	if rep == nil {
		return false
	}
	for _, f := range rep.Findings {
		if f.Check == check && f.Subject == subject && f.Severity == doctor.SeverityError {
			return true
		}
	}
	return false
}

// A finding is in the snapshot and heard after each run, logged once when
// it appears and once when it clears, however many runs see it; a doctor
// that cannot run says so in the snapshot, and is not heard.
func TestFindingsPublishedAndLoggedOnce(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	vf := n.PFs[2].VFs[1]
	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: "0000:0000:0000:0000", Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	c, rec, logs := newChecker(t, Config{Doctor: doctor.Options{SysfsRoot: n.Root, ExpectVFs: 8}, PortInterval: -1})
	if s := c.Snapshot(); !s.At.IsZero() || s.Report != nil {
		t.Errorf("snapshot before any run: %+v", s)
	}
	c.RunOnce()
	c.RunOnce()
	s := c.Snapshot()
	if s.At.IsZero() || s.Err != nil || !hasFinding(s.Report, finding.CheckGUIDInvalid, vf.PCI) {
		t.Errorf("snapshot after two runs: at %s, err %v, GUID finding %v", s.At, s.Err, hasFinding(s.Report, finding.CheckGUIDInvalid, vf.PCI))
	}
	if last, k := rec.lastReport(); k != 2 || !hasFinding(last, finding.CheckGUIDInvalid, vf.PCI) {
		t.Errorf("heard %d reports after 2 runs (the last with the finding: %v)", k, hasFinding(last, finding.CheckGUIDInvalid, vf.PCI))
	}
	if k := logs.Count(`msg="node doctor finding"`); k != 1 {
		t.Errorf("logged the finding %d times over two runs, want once:\n%s", k, logs)
	}

	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	c.RunOnce()
	if hasFinding(c.Snapshot().Report, finding.CheckGUIDInvalid, vf.PCI) {
		t.Error("the repaired VF's finding remains")
	}
	if k := logs.Count(`msg="node doctor finding cleared"`); k != 1 {
		t.Errorf("logged the clearing %d times, want once:\n%s", k, logs)
	}

	g, grec, _ := newChecker(t, Config{Doctor: doctor.Options{SysfsRoot: filepath.Join(t.TempDir(), "missing")}, PortInterval: -1})
	g.RunOnce()
	if s := g.Snapshot(); s.At.IsZero() || s.Err == nil || s.Report != nil {
		t.Errorf("snapshot of a doctor that cannot run: %+v", s)
	}
	if _, k := grec.lastReport(); k != 0 {
		t.Errorf("heard %d reports from a doctor that cannot run", k)
	}
}

// A free VF whose port goes down between two doctor runs (an hour apart
// here) is in the report the notifiers hear, and in the snapshot, within
// the port watcher's interval; the port coming back clears it the same
// way. The doctor itself runs once.
func TestFreeVFPortPublishedBetweenDoctorRuns(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	const every = 50 * time.Millisecond
	c, rec, logs := newChecker(t, Config{Doctor: doctor.Options{SysfsRoot: n.Root}, Interval: time.Hour, PortInterval: every})
	run(t, c)
	wait := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: not within 5 s\n%s", what, logs)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	wait("the first doctor report", func() bool { _, k := rec.lastReport(); return k >= 1 })
	doctorAt := c.Snapshot().At

	vf := n.PFs[1].VFs[6]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(vf.PortGUID)})
	took := wait("the port-down finding heard", func() bool {
		rep, _ := rec.lastReport()
		return hasFinding(rep, finding.CheckPortState, vf.PCI)
	})
	if took > time.Second {
		t.Errorf("the free VF's port down heard after %s, want within 1 s (port interval %s)", took, every)
	}
	if !hasFinding(c.Snapshot().Report, finding.CheckPortState, vf.PCI) {
		t.Error("the port-down finding heard is not in the snapshot")
	}

	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)})
	wait("the port-down finding cleared", func() bool {
		rep, _ := rec.lastReport()
		return rep != nil && !hasFinding(rep, finding.CheckPortState, vf.PCI)
	})
	if hasFinding(c.Snapshot().Report, finding.CheckPortState, vf.PCI) {
		t.Error("the cleared finding remains in the snapshot")
	}
	if again := c.Snapshot().At; !again.Equal(doctorAt) {
		t.Error("the doctor ran again: the port watcher's report was not what was heard")
	}
}

// With the port watcher off, a port going down waits for the doctor.
func TestPortWatcherOff(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	c, rec, _ := newChecker(t, Config{Doctor: doctor.Options{SysfsRoot: n.Root}, Interval: time.Hour, PortInterval: -1})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	start := time.Now()
	for _, k := rec.lastReport(); k == 0; _, k = rec.lastReport() {
		if time.Since(start) > 5*time.Second {
			t.Fatal("no doctor report")
		}
		time.Sleep(5 * time.Millisecond)
	}
	vf := n.PFs[0].VFs[0]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", GID0: sysfstest.GID0(vf.PortGUID)})
	time.Sleep(300 * time.Millisecond) // six port intervals of the test above
	cancel()
	<-done
	if rep, k := rec.lastReport(); k != 1 || hasFinding(rep, finding.CheckPortState, vf.PCI) {
		t.Errorf("with the port watcher off: %d reports, port-down heard %v; want 1, false", k, hasFinding(rep, finding.CheckPortState, vf.PCI))
	}
}

// A doctor run that has taken longer than StuckAfter is named by Stuck;
// Run does not start another meanwhile, and returns when its context
// ends although the run does not.
func TestStuckDoctorRun(t *testing.T) {
	c, _, _ := newChecker(t, Config{Doctor: doctor.Options{SysfsRoot: t.TempDir()}, StuckAfter: time.Minute, PortInterval: -1})
	now := time.Now()
	if !c.busy.Start() {
		t.Fatal("busy before any run")
	}
	defer c.busy.End()
	if lines := c.Stuck(now.Add(30 * time.Second)); len(lines) != 0 {
		t.Errorf("Stuck after 30 s of a 1 min limit: %q", lines)
	}
	lines := c.Stuck(now.Add(61 * time.Second))
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "stuck: the node doctor has been running for 1m1") {
		t.Errorf("Stuck after 61 s: %q", lines)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c.Run(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run returned %s after its context ended", took)
	}
	if s := c.Snapshot(); !s.At.IsZero() {
		t.Error("a doctor run started while one was running")
	}
}
