package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil/agenttest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The drift monitor section (issue 18): how soon the agent sees a change in
// a pod, what it costs while nothing changes, and that it keeps up with a
// burst. 64 attachments made through libcni ([host-device, ours]) on veth
// stand-ins, half of them with an InfiniBand RDMA device in a fixture sysfs
// (port state is read from sysfs), half plain (port state is the carrier).

const agent = "sriov-stable-agent"

// Change kinds injected, as reported.
const (
	changeRename  = "rename"
	changeAltName = "altname removal"
	changeCarrier = "carrier drop"
	changePort    = "RDMA port down (sysfs)"
)

var changeReason = map[string]string{
	changeRename: "renamed", changeAltName: "altname-missing", changeCarrier: "port-down", changePort: "port-down",
}

// driftResult is what the section measured.
type driftResult struct {
	attachments   int
	free          int             // free VFs the node checks saw beside them (sriov_stable_doctor_functions)
	freeDown      []time.Duration // a free VF's port down in sysfs → its doctor finding served on /metrics
	freeMissed    int
	latency       map[string][]time.Duration // per change kind, change start → "drift detected" logged
	missed        map[string]int
	burst         []time.Duration // 64 renames at once: each change start → its detection
	burstMissed   int
	sweep         []time.Duration // the same renames, spread over one interval, seen by sweeps alone
	sweepMissed   int
	sweepInterval time.Duration
	idleCPU       float64 // the agent's CPU while nothing changed, in cores
	idleWindow    time.Duration
	idleDrift     int   // drift logged while idle (should be none)
	rssKiB        int64 // VmRSS after the idle window
	anonKiB       int64 // its anonymous part (RssAnon): heap, stacks
	fileKiB       int64 // its file-backed part (RssFile): the binary's pages
	hwmKiB        int64 // VmHWM at the end
	sockets       int   // netlink sockets the agent held with every attachment in place
	subscriptions float64
	socketsAfter  int // after DEL of every attachment
	load          string
}

// driftNode is the section's node: fixture sysfs, state dir, stand-ins
// attached to pods through libcni.
type driftNode struct {
	tb       *harness.ProgramTB
	o        options
	sys      *sysfstest.Tree
	stateDir string
	slots    []*driftSlot
	free     []*driftSlot // VFs with an RDMA device and no pod: no stand-in, chain or netns
}

type driftSlot struct {
	i       int
	pci     string
	rdma    string // "" for a plain VF, whose port state is its carrier
	standIn *testutil.StandIn
	pod     ns.NetNS
	chain   *harness.Chain
	rt      *libcni.RuntimeConf
}

// driftPF is on a bus the chains' DGX fixture does not use: their stand-ins
// (and altnames) are still in the bench's netns when this section runs.
const driftPF = "0000:0e:00.0"

// driftVF is VF i of the fixture PF, numbered as on a ConnectX-7 (up to 254).
func driftVF(i int) string { return fmt.Sprintf("0000:0e:%02x.%x", (i+2)/8, (i+2)%8) }

func newDriftNode(tb *harness.ProgramTB, o options) *driftNode {
	run := mountTmpfs(tb, "drift-run")
	n := &driftNode{tb: tb, o: o, sys: sysfstest.New(tmpfsTB{tb, mountTmpfs(tb, "drift-sys")}), stateDir: filepath.Join(run, "sriov-stable")}
	n.sys.AddPF(driftPF, 256, sysfstest.Device{})
	disk, err := os.MkdirTemp(o.diskDir, "sriov-stable-bench-drift-")
	if err != nil {
		tb.Fatalf("directory on disk: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(disk) })
	for i := range o.driftAttachments {
		s := &driftSlot{i: i, pci: driftVF(i)}
		d := sysfstest.Device{}
		if i%2 == 1 {
			s.rdma = fmt.Sprintf("mlx5_%d", 10+i)
			d.RDMA = &sysfstest.RDMA{Name: s.rdma, NodeGUID: fmt.Sprintf("b83f:d203:00aa:%04x", i)}
		}
		n.sys.AddVF(driftPF, i, s.pci, d)
		s.standIn = testutil.NewStandIn(tb, fmt.Sprintf("dv%d", i), s.pci, true)
		s.pod = testutil.NewNetns(tb)
		ourConf := map[string]any{"type": ours, "deviceID": s.pci, "pciBusID": s.pci, "sysfsRoot": n.sys.Root,
			"stateDir": n.stateDir, "logFile": filepath.Join(disk, "sriov-stable-cni.log")}
		s.chain = harness.NewChainWithCache(tb, o.binDir, filepath.Join(disk, "results"),
			harness.ConfList(o.cniVersion, "bench-drift", map[string]any{"type": hostDevice, "device": s.standIn.Host}, ourConf))
		s.rt = harness.Runtime(fmt.Sprintf("drift-%02d", i), s.pod, "net1", nil)
		n.slots = append(n.slots, s)
	}
	for i := o.driftAttachments; i < o.driftAttachments+o.driftFree; i++ {
		s := &driftSlot{i: i, pci: driftVF(i), rdma: fmt.Sprintf("mlx5_%d", 10+i)}
		n.sys.AddVF(driftPF, i, s.pci, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: s.rdma, NodeGUID: fmt.Sprintf("b83f:d203:00aa:%04x", i)}})
		n.free = append(n.free, s)
	}
	for _, s := range n.slots {
		if _, err := s.chain.Add(s.rt); err != nil {
			tb.Fatalf("ADD of %s: %v", s.pci, err)
		}
	}
	return n
}

// driftSection runs the whole section.
func driftSection(tb *harness.ProgramTB, o options) *driftResult {
	tb.Logf("bench: drift monitor: %d attachments through libcni", o.driftAttachments)
	n := newDriftNode(tb, o)
	r := &driftResult{attachments: len(n.slots), latency: map[string][]time.Duration{}, missed: map[string]int{}, sweepInterval: o.driftSweep}
	// The shipped DaemonSet's flags (deploy/monitor): the node doctor every
	// 5 minutes, the port watcher at its default second.
	ag := startBenchAgent(tb, o, n, "127.0.0.1:9808", "--interval", "30s", "--doctor-interval", "5m")
	ag.waitMetric(tb, "every attachment ok", 60*time.Second, func(m promtext.Metrics) bool {
		return m[promtext.Series("sriov_stable_attachments", "network", "bench-drift", "status", "ok")] == float64(len(n.slots))
	})
	vfs := len(n.slots) + len(n.free)
	ag.waitMetric(tb, fmt.Sprintf("the node checks seeing all %d VFs", vfs), 60*time.Second, func(m promtext.Metrics) bool {
		return m[promtext.Series("sriov_stable_doctor_functions", "kind", "vf")] == float64(vfs)
	})
	r.free = vfs - len(n.slots)

	m := ag.Scrape(tb)
	r.sockets, r.subscriptions = ag.netlinkSockets(tb), m["sriov_stable_event_subscriptions"]
	tb.Logf("bench: drift monitor: idle for %s", o.driftIdle)
	before := ag.cpu(tb)
	detected := ag.log.count("drift detected")
	time.Sleep(o.driftIdle)
	r.idleCPU = (ag.cpu(tb) - before).Seconds() / o.driftIdle.Seconds()
	r.idleWindow = o.driftIdle
	r.idleDrift = ag.log.count("drift detected") - detected
	r.rssKiB = ag.status(tb, "VmRSS")
	r.anonKiB, r.fileKiB = ag.status(tb, "RssAnon"), ag.status(tb, "RssFile")

	tb.Logf("bench: drift monitor: %d free VFs' ports down, one at a time", len(n.free))
	for _, s := range n.free {
		ag.freePortDown(tb, r, s, n)
	}

	tb.Logf("bench: drift monitor: %d changes one at a time", o.driftChanges)
	// Renames and altname removals go round every attachment; carrier drops
	// round the plain ones (even), RDMA port drops round the others (odd),
	// twice.
	kinds := []string{changeRename, changeAltName, changeCarrier}
	for k := range o.driftChanges {
		kind := kinds[k%len(kinds)]
		s := n.slots[k%len(n.slots)]
		if kind == changeCarrier {
			s = n.slots[(2*(k/len(kinds)))%len(n.slots)]
		}
		ag.inject(tb, r, kind, s, n)
	}
	for k := range len(n.slots) {
		ag.inject(tb, r, changePort, n.slots[(2*k+1)%len(n.slots)], n)
	}

	tb.Logf("bench: drift monitor: %d renames at once", len(n.slots))
	r.burst, r.burstMissed = ag.burst(tb, n)

	tb.Logf("bench: drift monitor: the same renames seen by sweeps alone (--events=false --interval %s)", o.driftSweep)
	r.sweep, r.sweepMissed = sweepOnly(tb, o, n)

	for _, s := range n.slots {
		if err := s.chain.Del(s.rt); err != nil {
			tb.Fatalf("DEL of %s: %v", s.pci, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.socketsAfter = ag.netlinkSockets(tb); r.socketsAfter != 0 && time.Now().Before(deadline); r.socketsAfter = ag.netlinkSockets(tb) {
		time.Sleep(50 * time.Millisecond)
	}
	r.hwmKiB = ag.status(tb, "VmHWM")
	r.load = loadAvg()
	ag.stop(tb)
	return r
}

// freePortDown takes a free VF's port down in the fixture sysfs, times it
// until the port-state finding about the VF is served on /metrics (what
// the node condition and the device taint rules are written from), brings
// it back and waits until the finding is gone. It first waits a random
// part of a second, so the changes fall all over the port watcher's
// second.
func (a *benchAgent) freePortDown(tb *harness.ProgramTB, r *driftResult, s *driftSlot, n *driftNode) {
	series := promtext.Series("sriov_stable_doctor_finding", "check", "port-state", "severity", "error", "subject", s.pci)
	time.Sleep(time.Duration(a.rng.Int64N(int64(time.Second))))
	start := time.Now()
	n.sys.SetPort(s.pci, s.rdma, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	if a.pollMetric(tb, 5*time.Second, func(m promtext.Metrics) bool { return m[series] == 1 }) {
		r.freeDown = append(r.freeDown, time.Since(start))
	} else {
		r.freeMissed++
	}
	n.sys.SetPort(s.pci, s.rdma, 1, sysfstest.Port{})
	a.waitMetric(tb, "the free VF's port finding cleared", 10*time.Second, func(m promtext.Metrics) bool {
		_, present := m[series]
		return !present
	})
}

// inject makes one change in a pod (or its sysfs), times its detection,
// undoes it and waits until the attachment is clean again. A carrier or
// port change first waits a random part of a second: their detection
// depends on where in the poller's second (and the kernel's linkwatch
// second) the change falls, and changes made right after the undo of the
// last one would all fall at the same place.
func (a *benchAgent) inject(tb *harness.ProgramTB, r *driftResult, kind string, s *driftSlot, n *driftNode) {
	if kind == changeCarrier || kind == changePort {
		time.Sleep(time.Duration(a.rng.Int64N(int64(time.Second))))
	}
	id := s.rt.ContainerID
	seen := a.log.expect("drift detected", id, changeReason[kind])
	start := time.Now()
	do, undo := change(tb, kind, s, n)
	do()
	select {
	case at := <-seen:
		r.latency[kind] = append(r.latency[kind], at.Sub(start))
	case <-time.After(10 * time.Second):
		r.missed[kind]++
		tb.Logf("bench: %s in %s not seen within 10s", kind, id)
	}
	undo()
	if !a.log.clean(id, 30*time.Second) {
		tb.Fatalf("%s: %s still drifting 30s after the %s was undone:\n%s", id, a.log.drifting(id), kind, a.log.tail(20))
	}
}

// change returns how to make and undo one kind of change to a slot.
func change(tb *harness.ProgramTB, kind string, s *driftSlot, n *driftNode) (do, undo func()) {
	withVF := func(fn func(l netlink.Link) error) func() {
		return func() {
			err := s.pod.Do(func(ns.NetNS) error {
				l, err := netlinksafe.LinkByName("net1")
				if err != nil {
					return err
				}
				return fn(l)
			})
			if err != nil {
				tb.Fatalf("%s in %s: %v", kind, s.pod.Path(), err)
			}
		}
	}
	switch kind {
	case changeRename:
		return func() { testutil.RenameIn(tb, s.pod, "net1", "eth9") }, func() { testutil.RenameIn(tb, s.pod, "eth9", "net1") }
	case changeAltName:
		return withVF(func(l netlink.Link) error { return netlink.LinkDelAltName(l, s.standIn.AltName) }),
			withVF(func(l netlink.Link) error { return netlink.LinkAddAltName(l, s.standIn.AltName) })
	case changeCarrier:
		return func() { s.standIn.SetCarrier(tb, false) }, func() { s.standIn.SetCarrier(tb, true) }
	case changePort:
		return func() { n.sys.SetPort(s.pci, s.rdma, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"}) },
			func() { n.sys.SetPort(s.pci, s.rdma, 1, sysfstest.Port{}) }
	}
	tb.Fatalf("unknown change %s", kind)
	return nil, nil
}

// burst renames the VF in every pod at once and times each detection.
func (a *benchAgent) burst(tb *harness.ProgramTB, n *driftNode) ([]time.Duration, int) {
	seen := make([]<-chan time.Time, len(n.slots))
	for i, s := range n.slots {
		seen[i] = a.log.expect("drift detected", s.rt.ContainerID, "renamed")
	}
	starts := make([]time.Time, len(n.slots))
	together(len(n.slots), func(i int) {
		starts[i] = time.Now()
		testutil.RenameIn(tb, n.slots[i].pod, "net1", "eth9")
	})
	lat, missed := collect(seen, starts, 10*time.Second)
	together(len(n.slots), func(i int) { testutil.RenameIn(tb, n.slots[i].pod, "eth9", "net1") })
	for _, s := range n.slots {
		if !a.log.clean(s.rt.ContainerID, 30*time.Second) {
			tb.Fatalf("%s still drifting after the burst was undone: %s", s.rt.ContainerID, a.log.drifting(s.rt.ContainerID))
		}
	}
	return lat, missed
}

// sweepOnly runs a second agent with events off over the same records and
// renames each VF once, the renames spread evenly over one interval, so
// the sweep's detection delays cover the whole interval as a change's
// moment does in production. The first agent keeps running meanwhile.
func sweepOnly(tb *harness.ProgramTB, o options, n *driftNode) ([]time.Duration, int) {
	ag := startBenchAgent(tb, o, n, "127.0.0.1:9809", "--events=false", "--interval", o.driftSweep.String())
	defer ag.stop(tb)
	ag.waitMetric(tb, "every attachment ok", 2*o.driftSweep, func(m promtext.Metrics) bool {
		return m[promtext.Series("sriov_stable_attachments", "network", "bench-drift", "status", "ok")] == float64(len(n.slots))
	})
	step := o.driftSweep / time.Duration(len(n.slots))
	seen := make([]<-chan time.Time, len(n.slots))
	starts := make([]time.Time, len(n.slots))
	for i, s := range n.slots {
		seen[i] = ag.log.expect("drift detected", s.rt.ContainerID, "renamed")
		starts[i] = time.Now()
		testutil.RenameIn(tb, s.pod, "net1", "eth9")
		time.Sleep(step)
	}
	lat, missed := collect(seen, starts, o.driftSweep+10*time.Second)
	for _, s := range n.slots {
		testutil.RenameIn(tb, s.pod, "eth9", "net1")
	}
	return lat, missed
}

// collect waits at most timeout in all for each change's detection and
// returns the delays from each change's start, and how many were not seen.
func collect(seen []<-chan time.Time, starts []time.Time, timeout time.Duration) ([]time.Duration, int) {
	var lat []time.Duration
	missed := 0
	deadline := time.Now().Add(timeout)
	for i := range seen {
		select {
		case at := <-seen[i]:
			lat = append(lat, at.Sub(starts[i]))
		case <-time.After(time.Until(deadline)):
			missed++
		}
	}
	return lat, missed
}

// benchAgent is one `sriov-stable-agent monitor` process, run by the
// shared harness; its log lines also feed log, which times their arrival.
type benchAgent struct {
	*agenttest.Agent
	log *agentLog
	rng *rand.Rand
}

func startBenchAgent(tb *harness.ProgramTB, o options, n *driftNode, listen string, extra ...string) *benchAgent {
	args := append([]string{"monitor", "--state-dir", n.stateDir, "--sysfs-root", n.sys.Root,
		"--doctor-interval", "0", "--kmsg", "", "--log-level", "info"}, extra...)
	a := &benchAgent{log: newAgentLog(), rng: rand.New(rand.NewPCG(o.seed, 17))}
	r, w := io.Pipe()
	go a.log.read(r)
	a.Agent = agenttest.Start(tb, filepath.Join(o.binDir, agent), args, agenttest.Options{Listen: listen, Output: w})
	return a
}

func (a *benchAgent) stop(tb *harness.ProgramTB) {
	if err := a.Stop(); err != nil {
		tb.Fatalf("%v", err)
	}
}

func (a *benchAgent) waitMetric(tb *harness.ProgramTB, what string, timeout time.Duration, cond func(promtext.Metrics) bool) {
	if _, ok := a.Poll(tb, timeout, cond); !ok {
		tb.Fatalf("the agent: no %s within %s:\n%s", what, timeout, a.log.tail(20))
	}
}

// pollMetric scrapes every 20 ms until cond holds (true) or timeout passes
// (false); the agent exiting meanwhile ends the bench.
func (a *benchAgent) pollMetric(tb *harness.ProgramTB, timeout time.Duration, cond func(promtext.Metrics) bool) bool {
	_, ok := a.Poll(tb, timeout, cond)
	return ok
}

func (a *benchAgent) netlinkSockets(tb *harness.ProgramTB) int {
	n, err := testutil.NetlinkSocketsElsewhere(a.Pid()) // the port watcher's, in the agent's netns, aside
	if err != nil {
		tb.Fatalf("count the agent's netlink sockets: %v", err)
	}
	return n
}

// cpu is the agent's user+system CPU time so far, from /proc/PID/stat.
func (a *benchAgent) cpu(tb *harness.ProgramTB) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.Pid()))
	if err != nil {
		tb.Fatalf("agent CPU: %v", err)
	}
	// The command (field 2) is in parentheses and may hold spaces; utime and
	// stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// status reads one kB field of /proc/PID/status.
func (a *benchAgent) status(tb *harness.ProgramTB, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.Pid()))
	if err != nil {
		tb.Fatalf("agent status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// agentLog follows the agent's log as it is written: it hands the arrival
// time of an expected line to whoever waits for it, and keeps each
// attachment's current drift reasons.
type agentLog struct {
	mu      sync.Mutex
	waiters map[string][]chan time.Time // msg|containerID|reason
	drift   map[string]map[string]bool  // containerID → reasons
	counts  map[string]int              // msg → lines
	lines   []string                    // the last ones, for failure messages
	changed chan struct{}
}

func newAgentLog() *agentLog {
	return &agentLog{waiters: map[string][]chan time.Time{}, drift: map[string]map[string]bool{}, counts: map[string]int{},
		changed: make(chan struct{}, 1)}
}

func (l *agentLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		at := time.Now()
		line := sc.Text()
		msg, id, reason := logField(line, "msg"), logField(line, "containerID"), logField(line, "reason")
		l.mu.Lock()
		l.counts[msg]++
		l.lines = append(l.lines, line)
		if len(l.lines) > 200 {
			l.lines = l.lines[100:]
		}
		switch msg {
		case "drift detected":
			if l.drift[id] == nil {
				l.drift[id] = map[string]bool{}
			}
			l.drift[id][reason] = true
		case "drift recovered":
			delete(l.drift[id], reason)
		}
		key := msg + "|" + id + "|" + reason
		for _, w := range l.waiters[key] {
			w <- at
		}
		delete(l.waiters, key)
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// expect returns a channel that gets the arrival time of the next line
// with msg, containerID and reason.
func (l *agentLog) expect(msg, id, reason string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	key := msg + "|" + id + "|" + reason
	l.waiters[key] = append(l.waiters[key], ch)
	return ch
}

// clean waits until the attachment has no drift reason left.
func (l *agentLog) clean(id string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		n := len(l.drift[id])
		l.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-l.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			return false
		}
	}
}

func (l *agentLog) drifting(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for r := range l.drift[id] {
		out = append(out, r)
	}
	return strings.Join(out, ", ")
}

func (l *agentLog) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[msg]
}

func (l *agentLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-n):], "\n")
}

// logField returns the value of key=value (or key="value") in a slog text
// line, "" when absent.
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// driftTargets are issue 18's: a change in a pod seen within a second at
// p99 (port state, polled, within two), every change and every rename of a
// burst seen, the agent idle at most 1% of one core, one socket per
// attachment and none after DEL. A bound holds when the upper end of the
// figure's interval is within it: the p99's 90% bootstrap interval, the
// idle share plus one clock tick.
func (r *driftResult) targets() []target {
	var ts []target
	for _, kind := range []string{changeRename, changeAltName, changeCarrier, changePort} {
		limit := time.Second
		if kind == changePort {
			limit = 2 * time.Second
		}
		lat := r.latency[kind]
		p99 := quantile(lat, 0.99)
		lo, hi := quantileCI(lat, 0.99, 1)
		ts = append(ts, target{fmt.Sprintf("%s seen: p99 ≤ %s, none missed", kind, limit),
			fmt.Sprintf("p99 %s ms (90%% CI %s–%s) over %d, %d missed", ms(p99), ms(lo), ms(hi), len(lat), r.missed[kind]),
			len(lat) > 0 && hi <= limit && r.missed[kind] == 0})
	}
	// CPU time comes in clock ticks (USER_HZ, 10 ms): the measured share is
	// within one tick per window of the true one.
	tick := (10 * time.Millisecond).Seconds() / r.idleWindow.Seconds()
	return append(ts,
		target{fmt.Sprintf("%d renames at once: every one seen", r.attachments),
			fmt.Sprintf("%d of %d, the last after %s ms", len(r.burst), r.attachments, ms(quantile(r.burst, 1))), r.burstMissed == 0 && len(r.burst) == r.attachments},
		target{fmt.Sprintf("agent idle with %d attachments and %d free VFs ≤ 1%% of one core", r.attachments, r.free),
			fmt.Sprintf("%.2f%% (±%.2f%%, one clock tick) over %s", 100*r.idleCPU, 100*tick, r.idleWindow), r.idleWindow > 0 && r.idleCPU+tick <= 0.01},
		target{fmt.Sprintf("agent RSS with %d attachments and %d free VFs ≤ 40 MiB", r.attachments, r.free),
			fmt.Sprintf("%.1f MiB after the idle window (%.1f anonymous, %.1f the binary's pages; peak over the section %.1f MiB)",
				float64(r.rssKiB)/1024, float64(r.anonKiB)/1024, float64(r.fileKiB)/1024, float64(r.hwmKiB)/1024),
			r.rssKiB > 0 && r.rssKiB <= 40*1024},
		target{"free VF port down → its finding served: p99 ≤ 2 s, none missed", freeFigure(r),
			len(r.freeDown) > 0 && freeHi(r) <= 2*time.Second && r.freeMissed == 0},
		target{"netlink sockets = attachments, none after DEL",
			fmt.Sprintf("%d for %d attachments (gauge %v); %d after DEL", r.sockets, r.attachments, r.subscriptions, r.socketsAfter),
			r.sockets == r.attachments && r.subscriptions == float64(r.attachments) && r.socketsAfter == 0},
	)
}

func freeHi(r *driftResult) time.Duration {
	_, hi := quantileCI(r.freeDown, 0.99, 1)
	return hi
}

func freeFigure(r *driftResult) string {
	lo, hi := quantileCI(r.freeDown, 0.99, 1)
	return fmt.Sprintf("p99 %s ms (90%% CI %s–%s) over %d, %d missed", ms(quantile(r.freeDown, 0.99)), ms(lo), ms(hi), len(r.freeDown), r.freeMissed)
}

func (r *driftResult) print(w io.Writer) {
	fmt.Fprintf(w, "\n### Drift monitor: %d attachments, event-driven checks beside the sweep\n\n", r.attachments)
	fmt.Fprintf(w, "Each change is made in a pod (or, for RDMA port state, in the fixture sysfs) one at a time, timed from the moment the change "+
		"starts to the agent's `drift detected` log line, then undone; the agent runs with its defaults (`--interval 30s`, `--poll-interval 1s`). "+
		"Load average at the end %s.\n\n", r.load)
	fmt.Fprintf(w, "| change | n | p50 | p99 | max | missed |\n|---|--:|--:|--:|--:|--:|\n")
	for _, kind := range []string{changeRename, changeAltName, changeCarrier, changePort} {
		lat := r.latency[kind]
		fmt.Fprintf(w, "| %s | %d | %s ms | %s ms | %s ms | %d |\n", kind, len(lat), ms(median(lat)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1)), r.missed[kind])
	}
	fmt.Fprintf(w, "| %d renames at once | %d | %s ms | %s ms | %s ms | %d |\n", r.attachments, len(r.burst),
		ms(median(r.burst)), ms(quantile(r.burst, 0.99)), ms(quantile(r.burst, 1)), r.burstMissed)
	fmt.Fprintf(w, "| rename, sweep alone (`--events=false --interval %s`) | %d | %s ms | %s ms | %s ms | %d |\n", r.sweepInterval, len(r.sweep),
		ms(median(r.sweep)), ms(quantile(r.sweep, 0.99)), ms(quantile(r.sweep, 1)), r.sweepMissed)
	ev := r.latency[changeRename]
	fmt.Fprintf(w, "\nA rename is seen %s sooner at p50 and %s sooner at p99 than by the sweep alone.\n",
		times(ratio(median(r.sweep), median(ev))), times(ratio(quantile(r.sweep, 0.99), quantile(ev, 0.99))))
	fmt.Fprintf(w, "\nFree VFs (%d, with an RDMA device and no pod): a port taken down in sysfs is served as the doctor's `port-state` finding "+
		"on /metrics after p50 %s ms, p99 %s ms, max %s ms (%d missed); the node checks run with the shipped `--doctor-interval=5m`, so this is "+
		"the port watcher's doing.\n", r.free, ms(median(r.freeDown)), ms(quantile(r.freeDown, 0.99)), ms(quantile(r.freeDown, 1)), r.freeMissed)
	fmt.Fprintf(w, "\nIdle, with every attachment and free VF in place: the agent used %.2f%% of one core over %s (%d drift logged meanwhile), "+
		"RSS %.1f MiB (%.1f MiB anonymous, %.1f MiB file-backed; peak %.1f MiB over the section), and held %d netlink sockets for %d attachments (%d after DEL of all).\n",
		100*r.idleCPU, r.idleWindow, r.idleDrift, float64(r.rssKiB)/1024, float64(r.anonKiB)/1024, float64(r.fileKiB)/1024,
		float64(r.hwmKiB)/1024, r.sockets, r.attachments, r.socketsAfter)
}
