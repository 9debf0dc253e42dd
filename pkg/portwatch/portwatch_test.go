package portwatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// reports collects what a watcher hands on.
type reports struct {
	mu  sync.Mutex
	got []*doctor.PortReport
}

func (r *reports) add(p *doctor.PortReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
}

func (r *reports) all() []*doctor.PortReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*doctor.PortReport(nil), r.got...)
}

// errorsOf lists a report's errors as "check subject".
func errorsOf(p *doctor.PortReport) []string {
	out := []string{}
	for _, f := range p.Findings {
		if f.Severity == finding.Error {
			out = append(out, f.Check+" "+f.Subject)
		}
	}
	return out
}

func newWatcher(n *sysfstest.DGXNode, r *reports, every time.Duration) *Watcher {
	return New(Config{
		Doctor:   doctor.Options{SysfsRoot: n.Root, LinkLayer: config.LinkLayerInfiniBand},
		Interval: every,
		Changed:  r.add,
	})
}

// A free VF's port going down is one poll, one port check and one report
// naming that VF; nothing changing is no report, and the port coming back
// is a report without it.
func TestFreeVFPortDownAndBack(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	var r reports
	w := newWatcher(n, &r, time.Second)
	defer w.close()
	if !w.Poll() {
		t.Fatal("the first poll reports no change; the first report is never sent")
	}
	w.Check()
	if got := len(r.all()); got != 1 {
		t.Fatalf("%d reports after the first check, want 1", got)
	}
	first := r.all()[0]
	if diff := cmp.Diff([]string{}, errorsOf(first)); diff != "" {
		t.Errorf("errors on a healthy node (-want +got):\n%s", diff)
	}
	if want := sysfstest.DGXCards * sysfstest.DGXPFsPerCard * (1 + sysfstest.DGXVFsPerPF); len(first.Functions) != want {
		t.Errorf("%d functions covered, want %d (every PF and VF)", len(first.Functions), want)
	}
	if w.Poll() {
		t.Error("a poll with nothing changed reports a change")
	}

	vf := n.PFs[2].VFs[5]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(vf.PortGUID)})
	if !w.Poll() {
		t.Fatal("the poll after the VF's port went down reports no change")
	}
	if !w.Check() {
		t.Error("the check with the port down says it handed on nothing")
	}
	if w.Check() {
		t.Error("the same findings again are handed on again")
	}
	got := r.all()
	if len(got) != 2 {
		t.Fatalf("%d reports after the port went down, want 2", len(got))
	}
	if diff := cmp.Diff([]string{finding.CheckPortState + " " + vf.PCI}, errorsOf(got[1])); diff != "" {
		t.Errorf("errors with the VF's port down (-want +got):\n%s", diff)
	}

	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)})
	if !w.Poll() {
		t.Fatal("the poll after the port came back reports no change")
	}
	w.Check()
	if got := r.all(); len(got) != 3 || len(errorsOf(got[2])) != 0 {
		t.Errorf("after the port came back: %d reports, the last with errors %v; want 3, none", len(got), errorsOf(got[len(got)-1]))
	}
}

// A port that goes down after a poll read it and comes back before the
// next poll polls the same twice; the check between them handed on the
// port down, so the next round checks again anyway and hands on its
// return, then checks once more and stops when that changes nothing.
func TestPortBackBeforeThePollAfterItsCheck(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	var r reports
	w := newWatcher(n, &r, time.Second)
	defer w.close()
	if w.round(false) {
		t.Fatal("the first round on a healthy node ends wanting a confirmation")
	}
	vf := n.PFs[3].VFs[1]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(vf.PortGUID)})
	if !w.Check() { // as if it had run between the last poll and this change's undoing
		t.Fatal("the check with the port down handed on nothing")
	}
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)})
	if w.round(false) {
		t.Fatal("without a confirmation the round checked")
	}
	if got := r.all(); len(errorsOf(got[len(got)-1])) != 1 {
		t.Fatalf("the port's return was handed on without a confirmation: %v; the poll does not show it", errorsOf(got[len(got)-1]))
	}
	// The confirming round hands on the return and confirms that too (a
	// poll, then a check that changes nothing), so it ends wanting none.
	if w.round(true) {
		t.Error("the confirming round ends wanting another")
	}
	got := r.all()
	if len(got) != 3 || len(errorsOf(got[2])) != 0 {
		t.Fatalf("after the confirming round: %d reports, the last with errors %v; want 3, none", len(got), errorsOf(got[len(got)-1]))
	}
}

// A PF whose port fell back to Ethernet is one finding about the PF: its
// VFs follow it, as in a full doctor run.
func TestPFLinkLayerIsOneFinding(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	var r reports
	w := newWatcher(n, &r, time.Second)
	defer w.close()
	w.Poll()
	w.Check()
	pf := n.PFs[0]
	n.SetPort(pf.PCI, pf.RDMA, 1, sysfstest.Port{LinkLayer: "Ethernet", GID0: sysfstest.GID0(pf.NodeGUID)})
	if !w.Poll() {
		t.Fatal("a link layer change is not seen")
	}
	w.Check()
	got := r.all()
	if diff := cmp.Diff([]string{finding.CheckLinkLayer + " " + pf.PCI}, errorsOf(got[len(got)-1])); diff != "" {
		t.Errorf("errors with the PF on Ethernet (-want +got):\n%s", diff)
	}
}

// A device that goes and comes back (an unbind and bind, a VF handed back
// by a pod in RDMA exclusive mode) has new files: the poll opens them and
// sees its values, not the gone device's.
func TestDeviceBackIsReadAnew(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	var r reports
	w := newWatcher(n, &r, time.Second)
	defer w.close()
	w.Poll()
	w.Check()
	vf := n.PFs[1].VFs[0]
	n.ReprobeRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{State: "2: INIT", PhysState: "5: LinkUp", GID0: sysfstest.GID0(vf.PortGUID)}}})
	if !w.Poll() {
		t.Fatal("a re-probed device is not seen")
	}
	w.Check()
	got := r.all()
	if diff := cmp.Diff([]string{finding.CheckPortState + " " + vf.PCI}, errorsOf(got[len(got)-1])); diff != "" {
		t.Errorf("errors after the device came back INIT (-want +got):\n%s", diff)
	}
	if w.Poll() {
		t.Error("the poll after reading the new device's files reports a change")
	}
}

// Run hands on a port going down within an interval or two, and returns
// when its context ends.
func TestRunReportsWithinAnInterval(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	var r reports
	const every = 50 * time.Millisecond
	w := newWatcher(n, &r, every)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	wait := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: not within 5 s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	wait("the first report", func() bool { return len(r.all()) == 1 })
	vf := n.PFs[3].VFs[7]
	n.SetPort(vf.PCI, vf.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "2: Polling", GID0: sysfstest.GID0(vf.PortGUID)})
	took := wait("the port-down report", func() bool { return len(r.all()) == 2 })
	if took > 2*every+200*time.Millisecond {
		t.Errorf("port down reported after %s, want within two intervals of %s", took, every)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// BenchmarkPoll is the steady-state cost of one poll of a DGX H200 node's
// 72 RDMA devices (make bench reports the agent's idle CPU; this is the
// watcher's share).
func BenchmarkPoll(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	w := New(Config{Doctor: doctor.Options{SysfsRoot: n.Root}})
	defer w.close()
	w.Poll()
	for b.Loop() {
		if w.Poll() {
			b.Fatal("a change with nothing changed")
		}
	}
}

// A free VF's carrier dropping, read from its netdev's sysfs attributes
// (the agent's pod netns hears no link event of the host's), is handed on
// as its carrier finding within two intervals, and its coming back clears
// it; so does the VF leaving the host (to a pod: its net/ entry gone)
// while without carrier, and a netdev that comes back is read anew.
func TestCarrierDropPolled(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	vf := n.PFs[1].VFs[2]
	n.SetLinkState(vf.PCI, vf.NetDev, true, true)
	const every = 100 * time.Millisecond
	var r reports
	w := New(Config{Doctor: doctor.Options{SysfsRoot: n.Root}, Interval: every, Changed: r.add})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	last := func() []string {
		got := r.all()
		if len(got) == 0 {
			return nil
		}
		return errorsOf(got[len(got)-1])
	}
	wait := func(what string, want []string) {
		t.Helper()
		start := time.Now()
		for !cmp.Equal(last(), want) {
			if time.Since(start) > 2*every+time.Second {
				t.Fatalf("%s: errors %v, want %v within two intervals of %s", what, last(), want, every)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s: handed on after %s", what, time.Since(start).Round(time.Millisecond))
	}
	wait("the first report", []string{})
	down := []string{finding.CheckCarrier + " " + vf.PCI}
	n.SetLinkState(vf.PCI, vf.NetDev, true, false)
	wait("carrier dropped", down)
	n.SetLinkState(vf.PCI, vf.NetDev, true, true)
	wait("carrier back", []string{})
	n.SetLinkState(vf.PCI, vf.NetDev, true, false)
	wait("carrier dropped again", down)
	n.RemoveNetDev(vf.PCI, vf.NetDev)
	wait("the VF moved to a pod's netns", []string{})
	n.SetNetDev(vf.PCI, vf.NetDev)
	n.SetLinkState(vf.PCI, vf.NetDev, true, false)
	wait("the VF back on the host without carrier", down)
}
