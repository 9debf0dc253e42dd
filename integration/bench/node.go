package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// Plugin types as libcni finds them in the bin dir.
const (
	hostDevice = "host-device"
	tuning     = "tuning"
	floor      = "noop-chained"
	ours       = "sriov-stable-cni"
	// ourBaseline is the -baseline binary's type.
	ourBaseline = "sriov-stable-cni-baseline"
)

var verbs = []string{"ADD", "CHECK", "DEL"}

// node is the bench's host: a DGX H200 fixture sysfs (64 VFs with IB RDMA
// devices, so our GUID-duplicate check reads every VF's GUID as on a real
// node), veth stand-ins for the VFs it hands out, and the directories the
// plugins keep state in, each on the kind of file system it has in
// production.
type node struct {
	tb       *harness.ProgramTB
	o        options
	sys      *sysfstest.DGXNode
	vfs      []sysfstest.DGXVF
	used     int
	stateDir string // ours; a tmpfs, as its default /run/cni/sriov-stable is
	scanDir  string // ours, for the variant that finds no saved GUID index
	logFile  string // ours; on disk, as /var/log is
	cacheDir string // libcni's results cache; on disk, as /var/lib/cni/results is
	runDir   string // a tmpfs, as /run is: tuning's dataDir and our state dirs
	exec     *timedExec
}

func newNode(tb *harness.ProgramTB, o options) *node {
	disk, err := os.MkdirTemp(o.diskDir, "sriov-stable-bench-")
	if err != nil {
		tb.Fatalf("directory on disk: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(disk) })
	run := mountTmpfs(tb, "run")
	n := &node{
		tb: tb, o: o, exec: &timedExec{},
		stateDir: filepath.Join(run, "sriov-stable"), scanDir: filepath.Join(run, "sriov-stable-scan"), logFile: filepath.Join(disk, "sriov-stable-cni.log"),
		cacheDir: filepath.Join(disk, "results"), runDir: run,
	}
	// sysfs lives in memory; so does the fixture standing in for it.
	n.sys = sysfstest.NewDGXH200(tmpfsTB{tb, mountTmpfs(tb, "sys")})
	for _, pf := range n.sys.PFs {
		n.vfs = append(n.vfs, pf.VFs...)
	}
	n.addNeighbors()
	return n
}

// mountTmpfs mounts a fresh tmpfs on a new temp dir. The bench runs in its
// own mount namespace, so nobody else sees it.
func mountTmpfs(tb *harness.ProgramTB, name string) string {
	dir := filepath.Join(tb.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("%v", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=755"); err != nil {
		tb.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	tb.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// tmpfsTB hands out temp dirs under a tmpfs.
type tmpfsTB struct {
	*harness.ProgramTB
	root string
}

func (t tmpfsTB) TempDir() string {
	dir, err := os.MkdirTemp(t.root, "t-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	return dir
}

// addNeighbors records live attachments of the last o.neighbors VFs (in
// netns paths of their own) in our state dirs, so ADD's look at the other
// records costs what it costs on a node whose other VFs are in use.
func (n *node) addNeighbors() {
	if n.o.neighbors > len(n.vfs)/2 {
		n.tb.Fatalf("-neighbors %d: the fixture has %d VFs and the bench needs the rest", n.o.neighbors, len(n.vfs))
	}
	others := n.vfs[len(n.vfs)-n.o.neighbors:]
	n.vfs = n.vfs[:len(n.vfs)-n.o.neighbors]
	for _, dir := range []string{n.stateDir, n.scanDir} {
		n.saveNeighbors(state.NewStore(dir), others)
	}
}

func (n *node) saveNeighbors(store *state.Store, others []sysfstest.DGXVF) {
	for i, vf := range others {
		id := fmt.Sprintf("%064x", i+1)
		err := store.Save(&state.Record{
			Network: "rdma-rail", ContainerID: id, IfName: "net1", Netns: "/var/run/netns/neighbor-" + id[56:],
			PCI: vf.PCI, VFIndex: vf.Index, AltName: "vf-" + config.PCIToName(vf.PCI), MAC: "00:00:00:00:00:00",
			MTU: 4092, LinkLayer: "infiniband", NodeGUID: vf.NodeGUID, RDMA: []string{vf.RDMA},
			PortPolicy: "require", GUIDPolicy: "require", SysfsRoot: n.sys.Root, Created: time.Now().UTC(),
		})
		if err != nil {
			n.tb.Fatalf("neighbor record: %v", err)
		}
	}
}

// slot is one VF stand-in with the pod netns it is attached to.
type slot struct {
	vf      sysfstest.DGXVF
	standIn *testutil.StandIn
	pod     ns.NetNS
	sysRoot string // a fixture sysfs of the slot's own (see alone); "" for the node's
}

func (n *node) newSlot() *slot {
	if n.used == len(n.vfs) {
		n.tb.Fatalf("the fixture has only %d VFs", len(n.vfs))
	}
	vf := n.vfs[n.used]
	n.used++
	return &slot{vf: vf, standIn: testutil.NewStandIn(n.tb, fmt.Sprintf("bv%d", n.used), vf.PCI, true), pod: testutil.NewNetns(n.tb)}
}

// hostDeviceConf moves the stand-in by name. Multus would also write
// deviceID and pciBusID into it, but host-device would then look the VF up
// in the real /sys, where a stand-in has no PCI device.
func (n *node) hostDeviceConf(s *slot) map[string]any {
	return map[string]any{"type": hostDevice, "device": s.standIn.Host}
}

// multus adds the keys Multus writes into every plugin of a NAD's list.
func multus(s *slot, m map[string]any) map[string]any {
	m["deviceID"], m["pciBusID"] = s.vf.PCI, s.vf.PCI
	return m
}

func (n *node) tuningConf(s *slot) map[string]any {
	m := map[string]any{"type": tuning, "dataDir": filepath.Join(n.runDir, "tuning")}
	if n.o.tuning == "realistic" {
		m["mtu"] = 4092
		m["sysctl"] = map[string]string{"net.ipv4.conf.IFNAME.arp_notify": "1"}
	}
	return multus(s, m)
}

func (n *node) floorConf(s *slot) map[string]any { return multus(s, map[string]any{"type": floor}) }

func (n *node) baselineConf(s *slot) map[string]any {
	m := n.oursConf(s)
	m["type"] = ourBaseline
	return m
}

// oursConf is our plugin with its defaults (altName vf-{pci}, linkLayer
// auto, guidPolicy and portPolicy require) and a log file, as deployed.
func (n *node) oursConf(s *slot) map[string]any {
	return multus(s, map[string]any{"type": ours, "sysfsRoot": n.sys.Root, "stateDir": n.stateDir, "logFile": n.logFile})
}

// oursScanConf is oursConf with a state dir whose GUID index the bench
// removes before every ADD, so each ADD scans every RDMA device's GUID, as
// the first ADD after an RDMA device changed does.
func (n *node) oursScanConf(s *slot) map[string]any {
	m := n.oursConf(s)
	m["stateDir"] = n.scanDir
	return m
}

// alone gives the slot's VF a fixture sysfs of its own holding only it and
// its PF, with no RDMA device under the VF: with rdmaPF the PF has one, so
// the VF is one that must have one too and ADD looks for it in the pod
// netns (the host's view of RDMA netns exclusive mode, the device moved
// into the pod); without, nothing says it has one and ADD does not look.
// The two chains differ in that search alone.
func (n *node) alone(rdmaPF bool) func(*slot) {
	return func(s *slot) {
		t := sysfstest.New(tmpfsTB{n.tb, mountTmpfs(n.tb, "sys-"+s.vf.PCI)})
		pf := sysfstest.Device{}
		if rdmaPF {
			pf.RDMA = &sysfstest.RDMA{Name: "mlx5_0", NodeGUID: "a088:c203:0018:1000"}
		}
		pfAddr := s.vf.PCI[:len(s.vf.PCI)-4] + "00.0"
		t.AddPF(pfAddr, 16, pf)
		t.AddVF(pfAddr, s.vf.Index, s.vf.PCI, sysfstest.Device{})
		s.sysRoot = t.Root
	}
}

// oursAloneConf is oursConf over the slot's own fixture sysfs. The pod
// netns holds no RDMA device here (this host has no RDMA stack), so
// guidPolicy ignore lets ADD go on past the search without logging.
func (n *node) oursAloneConf(s *slot) map[string]any {
	m := n.oursConf(s)
	m["sysfsRoot"], m["guidPolicy"] = s.sysRoot, "ignore"
	return m
}

func (n *node) removeGUIDIndex() {
	if err := os.Remove(filepath.Join(n.scanDir, "guid-index")); err != nil && !os.IsNotExist(err) {
		n.tb.Fatalf("remove the GUID index: %v", err)
	}
}

func (n *node) chain(name string, plugins ...map[string]any) *harness.Chain {
	c := harness.NewChainWithCache(n.tb, n.o.binDir, n.cacheDir, harness.ConfList(n.o.cniVersion, name, plugins...))
	c.CNI = libcni.NewCNIConfigWithCacheDir([]string{n.o.binDir}, n.cacheDir, n.exec)
	return c
}

// call runs one verb of a chain for one attachment and returns the wall
// time of the whole libcni call and the plugin processes it ran.
func call(c *harness.Chain, verb string, rt *libcni.RuntimeConf) (time.Duration, []execSample, error) {
	log := &callLog{}
	ctx := withCallLog(context.Background(), log)
	start := time.Now()
	var err error
	switch verb {
	case "ADD":
		_, err = c.CNI.AddNetworkList(ctx, c.List, rt)
	case "CHECK":
		err = c.CNI.CheckNetworkList(ctx, c.List, rt)
	case "DEL":
		err = c.CNI.DelNetworkList(ctx, c.List, rt)
	default:
		panic("unknown verb " + verb)
	}
	return time.Since(start), log.execs, err
}

// variant is one chain of the interleaved comparison.
type variant struct {
	name   string // as reported
	second string // the plugin after host-device; "" for host-device alone
	slot   *slot
	chain  *harness.Chain
	times  map[string][]time.Duration // per verb, the chain's wall time per measured round
	execs  map[string][]execSample    // per verb, the second plugin's process per measured round
	hd     map[string][]execSample    // per verb, host-device's process per measured round
	rss    []execSample               // traced ADDs of the second plugin
	// beforeADD, when set, runs before each of the chain's ADDs, untimed.
	beforeADD func()
}

func containerID(rng *rand.Rand) string {
	return fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
}

// serialResult holds the interleaved rounds, host-device alone first.
type serialResult struct {
	variants []*variant
}

func (r *serialResult) get(name string) *variant {
	for _, v := range r.variants {
		if v.name == name {
			return v
		}
	}
	panic("no variant " + name)
}

// serialRounds runs every round: for each verb in turn, every chain once in
// a fresh random order, so drifting machine load hits all chains alike.
func serialRounds(tb *harness.ProgramTB, n *node, o options) *serialResult {
	res := &serialResult{}
	type spec struct {
		name, second string
		conf         func(*slot) map[string]any
		beforeADD    func()
		setup        func(*slot) // prepares the slot's VF, once
	}
	specs := []spec{
		{"host-device", "", nil, nil, nil},
		{"tuning", tuning, n.tuningConf, nil, nil},
		{"floor", floor, n.floorConf, nil, nil},
		{"ours", ours, n.oursConf, nil, nil},
		{"ours-scan", ours, n.oursScanConf, n.removeGUIDIndex, nil},
		{"ours-exclusive", ours, n.oursAloneConf, nil, n.alone(true)},
		{"ours-plain", ours, n.oursAloneConf, nil, n.alone(false)},
	}
	if o.baseline != "" {
		specs = append(specs, spec{"baseline", ourBaseline, n.baselineConf, nil, nil})
	}
	for _, spec := range specs {
		s := n.newSlot()
		if spec.setup != nil {
			spec.setup(s)
		}
		plugins := []map[string]any{n.hostDeviceConf(s)}
		if spec.conf != nil {
			plugins = append(plugins, spec.conf(s))
		}
		res.variants = append(res.variants, &variant{
			name: spec.name, second: spec.second, slot: s, chain: n.chain("bench-"+spec.name, plugins...),
			times: map[string][]time.Duration{}, execs: map[string][]execSample{}, hd: map[string][]execSample{},
			beforeADD: spec.beforeADD,
		})
	}
	rng := rand.New(rand.NewPCG(o.seed, 7))
	for round := -o.warmup; round < o.rounds; round++ {
		if round > 0 && round%50 == 0 {
			tb.Logf("bench: round %d/%d", round, o.rounds)
		}
		id := containerID(rng)
		for _, verb := range verbs {
			for _, k := range rng.Perm(len(res.variants)) {
				v := res.variants[k]
				if verb == "ADD" && v.beforeADD != nil {
					v.beforeADD()
				}
				d, execs, err := call(v.chain, verb, harness.Runtime(id, v.slot.pod, "net1", nil))
				if err != nil {
					tb.Fatalf("%s chain %s (round %d): %v", v.name, verb, round, err)
				}
				if round < 0 {
					continue
				}
				v.times[verb] = append(v.times[verb], d)
				for _, e := range execs {
					switch e.Plugin {
					case v.second:
						v.execs[verb] = append(v.execs[verb], e)
					case hostDevice:
						v.hd[verb] = append(v.hd[verb], e)
					}
				}
			}
		}
	}
	measureRSS(tb, res, o, rng)
	return res
}

// measureRSS runs ADD (and an untimed DEL) of each chain o.rssRuns times
// with its second plugin under ptrace, for its peak RSS.
func measureRSS(tb *harness.ProgramTB, res *serialResult, o options, rng *rand.Rand) {
	for range o.rssRuns {
		for _, v := range res.variants {
			if v.second == "" {
				continue
			}
			rt := harness.Runtime(containerID(rng), v.slot.pod, "net1", nil)
			log := &callLog{traceRSS: v.second}
			if _, err := v.chain.CNI.AddNetworkList(withCallLog(context.Background(), log), v.chain.List, rt); err != nil {
				tb.Fatalf("%s chain ADD under ptrace: %v", v.name, err)
			}
			for _, e := range log.execs {
				if e.Plugin == v.second {
					v.rss = append(v.rss, e)
				}
			}
			if _, _, err := call(v.chain, "DEL", rt); err != nil {
				tb.Fatalf("%s chain DEL: %v", v.name, err)
			}
		}
	}
}

// parallelResult is the bursts of simultaneous ADDs of one chain.
type parallelResult struct {
	name, second       string // chain as reported; its plugin after host-device ("" for host-device alone)
	addLatency         []time.Duration
	addFails, delFails int
	firstErr           error
	execs              []execSample // the second plugin's processes (host-device's for host-device alone)
}

// parallelBursts starts o.parallel ADDs at once on distinct stand-ins,
// o.parallelRounds times, with a parallel DEL of all after each burst, for
// each chain in turn (in random order per round): host-device alone, tuning
// and the floor show what the kernel, a peer and a do-nothing plugin cost
// under the same contention.
func parallelBursts(tb *harness.ProgramTB, n *node, o options) []*parallelResult {
	slots := make([]*slot, o.parallel)
	for i := range slots {
		slots[i] = n.newSlot()
	}
	results := []*parallelResult{{name: "host-device"}, {name: "tuning", second: tuning}, {name: "floor", second: floor}, {name: "ours", second: ours}}
	chains := make([][]*harness.Chain, len(results))
	for k, r := range results {
		for _, s := range slots {
			plugins := []map[string]any{n.hostDeviceConf(s)}
			switch r.second {
			case tuning:
				plugins = append(plugins, n.tuningConf(s))
			case floor:
				plugins = append(plugins, n.floorConf(s))
			case ours:
				plugins = append(plugins, n.oursConf(s))
			}
			chains[k] = append(chains[k], n.chain("bench-parallel-"+r.name, plugins...))
		}
	}
	rng := rand.New(rand.NewPCG(o.seed, 11))
	for round := range o.parallelRounds {
		for _, k := range rng.Perm(len(results)) {
			if !results[k].burst(slots, chains[k], rng) {
				tb.Logf("bench: a parallel DEL of %s failed in round %d; stopping the bursts (later ones would fail for that alone)", results[k].name, round)
				return results
			}
		}
	}
	return results
}

// burst runs one burst of ADDs and the DELs after it; false when a DEL
// failed or left a stand-in in its pod.
func (r *parallelResult) burst(slots []*slot, chains []*harness.Chain, rng *rand.Rand) bool {
	want := r.second
	if want == "" {
		want = hostDevice
	}
	rts := make([]*libcni.RuntimeConf, len(slots))
	for i, s := range slots {
		rts[i] = harness.Runtime(containerID(rng), s.pod, "net1", nil)
	}
	lat := make([]time.Duration, len(slots))
	errs := make([]error, len(slots))
	execs := make([][]execSample, len(slots))
	together(len(slots), func(i int) { lat[i], execs[i], errs[i] = call(chains[i], "ADD", rts[i]) })
	for i, err := range errs {
		if err != nil {
			r.addFails++
			r.firstErr = cmpErr(r.firstErr, fmt.Errorf("ADD on %s: %w", slots[i].vf.PCI, err))
			continue
		}
		r.addLatency = append(r.addLatency, lat[i])
		for _, e := range execs[i] {
			if e.Plugin == want {
				r.execs = append(r.execs, e)
			}
		}
	}
	together(len(slots), func(i int) { _, _, errs[i] = call(chains[i], "DEL", rts[i]) })
	ok := true
	for i, err := range errs {
		if err == nil && testutil.HostLink(slots[i].standIn.Host) == nil {
			err = fmt.Errorf("stand-in %s did not come back to the host", slots[i].standIn.Host)
		}
		if err != nil {
			r.delFails++
			r.firstErr = cmpErr(r.firstErr, fmt.Errorf("DEL on %s: %w", slots[i].vf.PCI, err))
			ok = false
		}
	}
	return ok
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// together runs f(0..n-1) in n goroutines released at the same moment.
func together(n int, f func(i int)) {
	start := make(chan struct{})
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			<-start
			f(i)
			done <- struct{}{}
		}()
	}
	close(start)
	for range n {
		<-done
	}
}
