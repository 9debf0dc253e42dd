package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

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

// A free VF whose port goes down between two doctor runs (an hour apart
// here) is in the report the notifiers hear, and in the doctor's metrics,
// within the port watcher's interval; the port coming back clears it the
// same way. The doctor itself runs once.
func TestFreeVFPortPublishedBetweenDoctorRuns(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	rec := &recorder{}
	const every = 50 * time.Millisecond
	f := newFixture(t, Config{SweepOnly: true, Notifiers: []Notifier{rec},
		Doctor: &doctor.Options{SysfsRoot: n.Root}, DoctorInterval: time.Hour, PortInterval: every})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.mon.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: not within 5 s\n%s", what, f.logs)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	wait("the first doctor report", func() bool { _, k := rec.lastReport(); return k >= 1 })
	f.mon.mu.Lock()
	doctorAt := f.mon.doctorAt
	f.mon.mu.Unlock()

	vf := n.PFs[1].VFs[6]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(vf.PortGUID)})
	took := wait("the port-down finding heard", func() bool {
		rep, _ := rec.lastReport()
		return hasFinding(rep, doctor.CheckPortState, vf.PCI)
	})
	if took > time.Second {
		t.Errorf("the free VF's port down heard after %s, want within 1 s (port interval %s)", took, every)
	}
	f.wantValue(t, 1, "sriov_stable_doctor_finding", "check", doctor.CheckPortState, "severity", "error", "subject", vf.PCI)

	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)})
	wait("the port-down finding cleared", func() bool {
		rep, _ := rec.lastReport()
		return rep != nil && !hasFinding(rep, doctor.CheckPortState, vf.PCI)
	})
	if _, ok := f.value(t, "sriov_stable_doctor_finding", "check", doctor.CheckPortState, "severity", "error", "subject", vf.PCI); ok {
		t.Error("the cleared finding's series remains")
	}
	f.mon.mu.Lock()
	again := f.mon.doctorAt
	f.mon.mu.Unlock()
	if !again.Equal(doctorAt) {
		t.Error("the doctor ran again: the port watcher's report was not what was heard")
	}
}

// With the port watcher off, a port going down waits for the doctor.
func TestPortWatcherOff(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	rec := &recorder{}
	f := newFixture(t, Config{SweepOnly: true, Notifiers: []Notifier{rec},
		Doctor: &doctor.Options{SysfsRoot: n.Root}, DoctorInterval: time.Hour, PortInterval: -1})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.mon.Run(ctx)
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
	if rep, k := rec.lastReport(); k != 1 || hasFinding(rep, doctor.CheckPortState, vf.PCI) {
		t.Errorf("with the port watcher off: %d reports, port-down heard %v; want 1, false", k, hasFinding(rep, doctor.CheckPortState, vf.PCI))
	}
}
