package monitor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const testPF = "0000:18:00.0"

// node is a fixture sysfs with one PF and pods each holding one VF's
// stand-in as net1, recorded in the fixture's state dir as ADD records it.
type node struct {
	t    *testing.T
	f    *fixture
	sys  *sysfstest.Tree
	pods []*podVF
}

// podVF is one attachment: the pod netns, the VF's stand-in inside it
// (named net1, carrying its stable altname) and its record.
type podVF struct {
	pod   ns.NetNS
	vf    *testutil.StandIn
	rec   *state.Record
	index int
}

// rdmaEvery gives every rdmaEvery-th VF an InfiniBand RDMA device (its
// port state is what the poller reads).
const rdmaEvery = 4

func newNode(t *testing.T, cfg Config, vfs int) *node {
	t.Helper()
	requireRoot(t)
	sys := sysfstest.New(t)
	sys.AddPF(testPF, 128, sysfstest.Device{})
	for i := range vfs {
		d := sysfstest.Device{}
		if i%rdmaEvery == 1 {
			d.RDMA = &sysfstest.RDMA{Name: fmt.Sprintf("mlx5_%d", 10+i), NodeGUID: fmt.Sprintf("b83f:d203:00aa:%04x", i)}
		}
		sys.AddVF(testPF, i, testutil.VFAddr(i), d)
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = sys.Root
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour // one sweep at the start: the rest is events
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 5 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	n := &node{t: t, f: newFixture(t, cfg), sys: sys}
	n.pods = make([]*podVF, vfs)
	var wg sync.WaitGroup
	for i := range vfs {
		wg.Go(func() { n.pods[i] = n.attach(i, testutil.NewNetns(t)) })
	}
	wg.Wait()
	return n
}

// attach makes VF i's stand-in inside pod as net1, up, with its stable
// altname, and records the attachment under the VF's lock, as ADD does.
func (n *node) attach(i int, pod ns.NetNS) *podVF {
	t := n.t
	p := &podVF{pod: pod, index: i}
	err := pod.Do(func(ns.NetNS) error {
		p.vf = testutil.NewStandIn(t, "net1", testutil.VFAddr(i), true)
		l, err := netlinksafe.LinkByName("net1")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		p.rec = &state.Record{
			Network: "ib-a", ContainerID: fmt.Sprintf("pod-%02d", i), IfName: "net1", Netns: pod.Path(),
			PodNamespace: "default", PodName: fmt.Sprintf("pod-%02d", i), PodUID: fmt.Sprintf("uid-%02d", i),
			PCI: testutil.VFAddr(i), PF: testPF, VFIndex: i, AltName: "vf-" + config.PCIToName(testutil.VFAddr(i)),
			MAC: l.Attrs().HardwareAddr.String(), MTU: l.Attrs().MTU, LinkLayer: "ethernet",
			PortPolicy: "require", GUIDPolicy: "require", SysfsRoot: n.sys.Root, Created: time.Now().UTC(),
		}
		if i%rdmaEvery == 1 {
			p.rec.LinkLayer, p.rec.RDMA = "infiniband", []string{fmt.Sprintf("mlx5_%d", 10+i)}
			p.rec.NodeGUID = fmt.Sprintf("b83f:d203:00aa:%04x", i)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("attach VF %d: %v", i, err)
	}
	n.record(p.rec)
	return p
}

// record saves rec as the VF's owner, as ADD does.
func (n *node) record(rec *state.Record) {
	n.t.Helper()
	lock, err := n.f.store.LockVF(rec.PCI)
	if err != nil {
		n.t.Fatal(err)
	}
	defer lock.Unlock()
	if err := lock.SetOwner(rec.Key(), ""); err != nil {
		n.t.Fatal(err)
	}
	if err := n.f.store.Save(rec); err != nil {
		n.t.Fatal(err)
	}
}

// run starts the monitor and waits until every attachment was checked
// and is ok; stop stops it and waits for Run to return.
func (n *node) run() (stop func()) {
	stop = n.start()
	n.waitFor("every attachment checked and ok", 10*time.Second, func() bool {
		v, _ := n.f.value(n.t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
		return int(v) == len(n.pods)
	})
	return stop
}

// start runs the monitor until the test ends, and returns a function that
// stops it and waits for Run to return.
func (n *node) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.f.mon.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				n.t.Error("Run did not return within 10s of its context ending")
			}
		})
	}
	n.t.Cleanup(stop)
	return stop
}

// waitFor polls cond every few milliseconds for at most timeout and
// returns how long it took to hold.
func (n *node) waitFor(what string, timeout time.Duration, cond func() bool) time.Duration {
	n.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			buf := make([]byte, 1<<20)
			n.t.Fatalf("%s: not within %s\nlog:\n%s\ngoroutines:\n%s", what, timeout, n.f.logs, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func (n *node) driftOf(reason drift.Reason) float64 {
	v, _ := n.f.value(n.t, "sriov_stable_attachment_drift", "network", "ib-a", "reason", string(reason))
	return v
}

// in changes a link of pod p with netlink, as a process in the pod would.
func (p *podVF) in(t *testing.T, name string, fn func(l netlink.Link) error) {
	t.Helper()
	err := p.pod.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		return fn(l)
	})
	if err != nil {
		t.Fatalf("in %s, %s: %v", p.pod.Path(), name, err)
	}
}

func (p *podVF) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	return testutil.LinkIn(t, p.pod, name)
}

func rename(to string) func(l netlink.Link) error {
	return func(l netlink.Link) error {
		_ = netlink.LinkSetDown(l)
		if err := netlink.LinkSetName(l, to); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}
}

// eventBound bounds a change's detection in the tests: far below the
// sweep's interval (an hour here), with room for a loaded machine. The
// bench measures the p99 against the 1 s target.
const eventBound = 2 * time.Second

// Each kind of change in a pod netns is seen at once, with no sweep after
// the first: a rename, an altname removed, the carrier dropping, the MTU
// changing (link notifications) and an RDMA port going down (sysfs,
// polled); and each recovery.
func TestEventsSeenWithoutASweep(t *testing.T) {
	n := newNode(t, Config{}, 8)
	n.run()
	plain, ib := n.pods[0], n.pods[1]
	changes := []struct {
		what     string
		reason   drift.Reason
		do, undo func()
	}{
		{"rename", drift.Renamed, func() { plain.in(t, "net1", rename("eth9")) }, func() { plain.in(t, "eth9", rename("net1")) }},
		{"altname removed", drift.AltNameMissing,
			func() {
				plain.in(t, "net1", func(l netlink.Link) error { return netlink.LinkDelAltName(l, plain.rec.AltName) })
			},
			func() {
				plain.in(t, "net1", func(l netlink.Link) error { return netlink.LinkAddAltName(l, plain.rec.AltName) })
			}},
		{"carrier drop", drift.PortDown, func() { plain.vf.SetCarrier(t, false) }, func() { plain.vf.SetCarrier(t, true) }},
		{"MTU change", drift.MTU,
			func() { plain.in(t, "net1", func(l netlink.Link) error { return netlink.LinkSetMTU(l, 1280) }) },
			func() {
				plain.in(t, "net1", func(l netlink.Link) error { return netlink.LinkSetMTU(l, plain.rec.MTU) })
			}},
		{"RDMA port down", drift.PortDown,
			func() {
				n.sys.SetPort(testutil.VFAddr(ib.index), ib.rec.RDMA[0], 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
			},
			func() { n.sys.SetPort(testutil.VFAddr(ib.index), ib.rec.RDMA[0], 1, sysfstest.Port{}) }},
	}
	for _, c := range changes {
		c.do()
		took := n.waitFor(c.what+" seen", 5*time.Second, func() bool { return n.driftOf(c.reason) == 1 })
		if took > eventBound {
			t.Errorf("%s seen after %s, want within %s", c.what, took, eventBound)
		}
		c.undo()
		back := n.waitFor(c.what+" recovered", 5*time.Second, func() bool { return n.driftOf(c.reason) == 0 })
		t.Logf("%s: seen after %s, recovery after %s", c.what, took.Round(time.Millisecond), back.Round(time.Millisecond))
	}
	n.f.wantValue(t, 1, "sriov_stable_sweeps_total")
	for _, src := range []string{status.TriggerLink, status.TriggerSysfs} {
		if v, _ := n.f.value(t, "sriov_stable_events_total", "source", src); v == 0 {
			t.Errorf("no check queued by source %s", src)
		}
	}
	// Each change is logged once; port-down comes from the carrier drop,
	// the RDMA port, and may come from the renames (the link is down while
	// it is renamed).
	for reason, want := range map[drift.Reason]int{drift.Renamed: 1, drift.AltNameMissing: 1, drift.MTU: 1} {
		if got := n.f.logs.Lines(`msg="drift detected"`, "reason="+string(reason)); got != want {
			t.Errorf("%s detected %d times, want %d:\n%s", reason, got, want, n.f.logs)
		}
	}
	if got := n.f.logs.Lines(`msg="drift detected"`, "reason=port-down"); got < 2 {
		t.Errorf("port-down detected %d times, want at least 2 (carrier, RDMA port):\n%s", got, n.f.logs)
	}
}

// netlinkSockets counts this process's netlink sockets.
func netlinkSockets(t *testing.T) int {
	t.Helper()
	c, err := testutil.NetlinkSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openUnder counts this process's open files under dir.
func openUnder(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, dir+"/") {
			c++
		}
	}
	return c
}

// Subscriptions follow the records: one socket per attachment while its
// netns exists; a record deleted or a netns gone closes its socket (so the
// netns can go), a new record opens one, and when Run returns every socket
// and every polled sysfs file is closed and every goroutine it started has
// ended.
func TestSubscriptionsFollowRecords(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	baseline := netlinkSockets(t)
	n := newNode(t, Config{}, 6)
	stop := n.run()
	want := func(what string, subs int) {
		t.Helper()
		n.waitFor(what, 5*time.Second, func() bool {
			v, _ := n.f.value(t, "sriov_stable_event_subscriptions")
			return int(v) == subs && netlinkSockets(t) == baseline+subs
		})
	}
	want("a socket per attachment", 6)
	// Per RDMA VF (two of the six): node_guid, ports/1/state and ports/1/link_layer.
	n.waitFor("the RDMA VFs' polled files open", 5*time.Second, func() bool { return openUnder(t, n.sys.Root) == 6 })

	// DEL removes a record: its socket closes.
	if err := n.f.store.Delete(n.pods[0].rec.Key()); err != nil {
		t.Fatal(err)
	}
	want("the deleted record's socket closed", 5)

	// A sandbox torn down without DEL: the socket closes, the attachment
	// turns stale, and the netns itself goes (nothing holds it).
	gone := n.pods[1]
	testutil.RemoveNetns(t, gone.pod)
	want("the vanished netns's socket closed", 4)
	n.waitFor("the attachment stale", 5*time.Second, func() bool {
		v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "stale")
		return v == 1
	})

	// ADD records a new attachment: it is subscribed to and checked.
	late := n.attach(7, testutil.NewNetns(t))
	want("a socket for the new record", 5)
	late.in(t, "net1", rename("eth3"))
	n.waitFor("the new attachment's rename seen", 5*time.Second, func() bool { return n.driftOf(drift.Renamed) == 1 })

	stop()
	if v, _ := n.f.value(t, "sriov_stable_event_subscriptions"); v != 0 {
		t.Errorf("%v subscriptions counted after Run returned", v)
	}
	if got := netlinkSockets(t); got != baseline {
		t.Errorf("%d netlink sockets after Run returned, want %d", got, baseline)
	}
	if got := openUnder(t, n.sys.Root); got != 0 {
		t.Errorf("%d sysfs files still open after Run returned", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Run returned, %d before it started:\n%s", g, goroutines, buf[:runtime.Stack(buf, true)])
	}
}

// A burst of renames in every pod at once: every one is detected, none
// starved by the others.
func TestBurstOfRenamesAllDetected(t *testing.T) {
	const pods = 64
	n := newNode(t, Config{}, pods)
	n.run()
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range n.pods {
		wg.Go(func() { p.in(t, "net1", rename("eth9")) })
	}
	wg.Wait()
	n.waitFor("every rename seen", 10*time.Second, func() bool { return n.driftOf(drift.Renamed) == pods })
	took := time.Since(start)
	t.Logf("%d renames at once: the last seen %s after the first was made", pods, took)
	if took > eventBound {
		t.Errorf("the last of %d renames seen %s after the burst began, want within %s", pods, took, eventBound)
	}
	for _, p := range n.pods {
		if c := n.f.logs.Count(`containerID=` + p.rec.ContainerID + ` `); c == 0 {
			t.Errorf("nothing logged about %s", p.rec.ContainerID)
		}
	}
}

// stateDir is the records directory a test may remove to see the watch
// come back.
func recordsDir(f *fixture) string { return filepath.Join(f.store.Dir(), "attachments") }

// The state directory watch picks up records even when the directory
// appears only after the monitor started.
func TestRecordsWatchedFromAnEmptyStateDir(t *testing.T) {
	n := newNode(t, Config{}, 0)
	n.run()
	if _, err := os.Stat(recordsDir(n.f)); err == nil {
		t.Fatal("the records directory exists before the first record")
	}
	p := n.attach(3, testutil.NewNetns(t))
	n.pods = append(n.pods, p)
	n.waitFor("the first record checked", 5*time.Second, func() bool {
		v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
		return v == 1
	})
	n.f.wantValue(t, 1, "sriov_stable_sweeps_total")
	n.f.wantValue(t, 1, "sriov_stable_events_total", "source", status.TriggerRecord)
}

// A port that goes down between the attachment's first check and the
// poller's first read is still seen: the poller reads the port before that
// check is queued, not at its first tick.
func TestPortChangeRightAfterSubscribing(t *testing.T) {
	n := newNode(t, Config{PollInterval: time.Second}, 2)
	n.start()
	ib := n.pods[1]
	n.waitFor("the attachments subscribed and checked", 5*time.Second, func() bool {
		v, _ := n.f.value(t, "sriov_stable_event_subscriptions")
		ok, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
		return v == 2 && ok == 2
	})
	// Let the checks queued by the records (30 ms settle) finish, well
	// before the poller's first tick at one second.
	time.Sleep(300 * time.Millisecond)
	n.sys.SetPort(testutil.VFAddr(ib.index), ib.rec.RDMA[0], 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	n.waitFor("the port down seen", 5*time.Second, func() bool { return n.driftOf(drift.PortDown) == 1 })
}

// TestPortPollAdopt: files a check hands over (a device in its pod's netns,
// read through that netns's sysfs instance) are polled in place of host
// paths, survive a sweep's reopen, and once they fail to read the poller
// asks the next check for new ones instead of opening host paths.
func TestPortPollAdopt(t *testing.T) {
	dir := t.TempDir()
	p := newPortPoll(sysfs.Reader{Root: dir}, "0000:18:00.2") // no host files at all
	p.baseline()
	write := func(name, v string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var files []*os.File
	for _, path := range []string{write("node_guid", "a288:c2ff:fe18:0000"), write("state", "4: ACTIVE"), write("link_layer", "InfiniBand")} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	last, ok := sysfs.ReadPolled(nil, files, make([]byte, 64))
	if !ok {
		t.Fatal("cannot read the files")
	}
	p.adopt("/var/run/netns/pod mlx5_10:1", files, last)
	if p.changed() {
		t.Error("changed right after the handover, with the values the check read")
	}
	write("state", "1: DOWN")
	if !p.changed() {
		t.Error("a port going down in the netns was not seen")
	}
	p.stale.Store(true) // a sweep: host paths would be opened anew, handed-over files stay
	write("node_guid", "0000:0000:0000:0000")
	if !p.changed() || len(p.files) != 3 {
		t.Errorf("after a sweep the poller holds %d files and saw no GUID change", len(p.files))
	}
	files[1].Close() // what a read of a device gone from the netns gives
	if !p.changed() {
		t.Error("an unreadable file was not reported")
	}
	if p.files != nil || !p.fromCheck || p.adopted != "" {
		t.Errorf("after a failed read: %d files, fromCheck %v, adopted %q; want none, true, \"\"", len(p.files), p.fromCheck, p.adopted)
	}
	p.changed() // nothing to read until a check hands files over again
	if p.files != nil {
		t.Error("the poller opened host paths for a device that lives in a netns")
	}
	p.adopt("", nil, nil) // the device is back in the host's view
	p.changed()
	if p.fromCheck || p.files == nil {
		t.Errorf("back on host paths: fromCheck %v, files %v", p.fromCheck, p.files)
	}
	p.close()
	for _, f := range files {
		f.Close()
	}
}

// TestFailedCheckTriedAgain: a check that fails on a read (here phys_state,
// which the poller does not watch, unparsable as a file half rewritten
// reads) leaves the attachment unknown; once the file is whole again the
// attachment is checked again within a few poll intervals, not at the next
// sweep (an hour here).
func TestFailedCheckTriedAgain(t *testing.T) {
	n := newNode(t, Config{PollInterval: 100 * time.Millisecond}, 2)
	n.start()
	ib := n.pods[1]
	ok := func() float64 {
		v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
		return v
	}
	n.waitFor("both attachments ok and subscribed", 5*time.Second, func() bool {
		v, _ := n.f.value(t, "sriov_stable_event_subscriptions")
		return ok() == 2 && v == 2
	})
	time.Sleep(300 * time.Millisecond) // the checks the records queued are done
	dir := filepath.Join(n.sys.DevicePath(testutil.VFAddr(ib.index)), "infiniband", ib.rec.RDMA[0], "ports", "1")
	n.sys.WriteFile(filepath.Join(dir, "phys_state"), "")
	n.sys.WriteFile(filepath.Join(dir, "state"), "1: DOWN") // the poller's cue
	n.waitFor("the check failing", 5*time.Second, func() bool {
		v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "unknown")
		return v == 1
	})
	// The polled file back first (its check fails too), then only the
	// file the poller does not read: no event says anything changed.
	n.sys.WriteFile(filepath.Join(dir, "state"), "4: ACTIVE")
	time.Sleep(500 * time.Millisecond)
	if v := ok(); v != 1 {
		t.Fatalf("%v attachments ok with phys_state unreadable, want 1", v)
	}
	n.sys.WriteFile(filepath.Join(dir, "phys_state"), "5: LinkUp")
	n.waitFor("the attachment checked again and ok", 10*time.Second, func() bool { return ok() == 2 })
}

// TestPortBackAfterACheckSawItDown: a check that is not the poller's (a
// sweep) sees an RDMA port DOWN before the poller read it, and the port
// comes back before the poller's next read. The poller must still see a
// change then, so the recovery is checked within a poll interval, not at
// the next sweep: its values are taken when a check starts reading. (A
// make bench run saw port-down reported for 30 s after the port was back.)
func TestPortBackAfterACheckSawItDown(t *testing.T) {
	n := newNode(t, Config{PollInterval: time.Hour}, 2) // the test reads for the poller
	n.start()
	ib := n.pods[1]
	status := func(s string) float64 {
		v, _ := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", s)
		return v
	}
	n.waitFor("both attachments ok", 5*time.Second, func() bool { return status("ok") == 2 })
	m := n.f.mon
	m.mu.Lock()
	a := m.current(ib.rec)
	m.mu.Unlock()
	if a == nil || a.ports == nil {
		t.Fatal("the RDMA attachment has no port poller")
	}
	state := filepath.Join(n.sys.DevicePath(testutil.VFAddr(ib.index)), "infiniband", ib.rec.RDMA[0], "ports", "1", "state")
	n.sys.WriteFile(state, "1: DOWN")
	m.Sweep(context.Background())
	if got := status("drifted"); got != 1 {
		t.Fatalf("%v attachments drifted after the check of a DOWN port, want 1", got)
	}
	n.sys.WriteFile(state, "4: ACTIVE")
	if !a.ports.changed() {
		t.Fatal("the poller sees no change when the port is back: the recovery waits for the next sweep")
	}
}

func requireRoot(t *testing.T) {
	testutil.RequireRoot(t, "makes network namespaces and veth stand-ins for VFs")
}
