package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const (
	pf      = "0000:18:00.0"
	ours    = "sriov-stable-cni"
	network = "vfnet"
)

// guid is a distinct, valid node GUID for VF i.
func guid(i int) string { return fmt.Sprintf("b83f:d203:00aa:%04x", 0x100+i) }

// hostSeq numbers stand-in names; names stay unique across the whole run
// so a stand-in that died with its pod never collides with its successor.
var hostSeq atomic.Int32

func nextHostName() string { return fmt.Sprintf("rl%d", hostSeq.Add(1)) }

// node is one test's SR-IOV node: fixture sysfs, state dir, libcni cache,
// binaries and one veth stand-in per VF.
type node struct {
	t        testing.TB
	bins     string
	sys      *sysfstest.Tree
	stateDir string
	cacheDir string
	logFile  string
	vfs      []*testutil.StandIn
}

func newNode(t testing.TB, numVFs int, rdma bool) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{
		t: t, bins: harness.Bins(t), sys: sysfstest.New(t),
		stateDir: filepath.Join(dir, "state"), cacheDir: filepath.Join(dir, "cache"), logFile: filepath.Join(dir, "plugin.log"),
	}
	n.sys.AddPF(pf, 128, sysfstest.Device{})
	for i := range numVFs {
		d := sysfstest.Device{}
		if rdma {
			d.RDMA = &sysfstest.RDMA{Name: fmt.Sprintf("mlx5_%d", 10+i), NodeGUID: guid(i), FWVer: "28.43.1014"}
		}
		n.sys.AddVF(pf, i, testutil.VFAddr(i), d)
		n.vfs = append(n.vfs, testutil.NewStandIn(t, nextHostName(), testutil.VFAddr(i), true))
	}
	return n
}

// respawn replaces VF i's stand-in after its pod netns was destroyed (a veth
// dies with its namespace; a real VF would come back to the host). The new
// pair has a fresh host name, the same PCI address and altname, and its peer
// in the same wire netns.
func (n *node) respawn(i int) *testutil.StandIn {
	n.t.Helper()
	old := n.vfs[i]
	s := &testutil.StandIn{Host: nextHostName(), PCI: old.PCI, AltName: old.AltName, Wire: old.Wire}
	s.Peer = "w" + s.Host
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.Host}, PeerName: s.Peer, PeerNamespace: netlink.NsFd(int(s.Wire.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		n.t.Fatalf("respawn stand-in for %s: %v", s.PCI, err)
	}
	n.t.Cleanup(func() {
		_ = s.Wire.Do(func(ns.NetNS) error {
			if l, err := netlinksafe.LinkByName(s.Peer); err == nil {
				return netlink.LinkDel(l)
			}
			return nil
		})
	})
	l, err := netlinksafe.LinkByName(s.Host)
	if err != nil {
		n.t.Fatalf("respawned stand-in %s: %v", s.Host, err)
	}
	if err := netlink.LinkAddAltName(l, s.AltName); err != nil {
		n.t.Fatalf("altname %s on respawned %s: %v", s.AltName, s.Host, err)
	}
	s.SetCarrier(n.t, true)
	n.vfs[i] = s
	return s
}

// ours is our plugin's entry with deviceID and pciBusID as Multus writes
// them (vf < 0: neither) and extra fields merged in (nil deletes a key).
func (n *node) ours(vf int, extra map[string]any) map[string]any {
	m := map[string]any{
		"type": ours, "sysfsRoot": n.sys.Root, "stateDir": n.stateDir,
		"portWaitMs": 300, "logLevel": "debug", "logFile": n.logFile,
	}
	if vf >= 0 {
		m["deviceID"], m["pciBusID"] = testutil.VFAddr(vf), testutil.VFAddr(vf)
	}
	return testutil.Merge(m, extra)
}

func hostDevice(host string) map[string]any {
	return map[string]any{"type": "host-device", "device": host}
}

func udev(newName string) map[string]any {
	return map[string]any{"type": "rename-as-udev", "newName": newName}
}

// chain builds [host-device <host>, middle…, sriov-stable-cni for VF vf].
func (n *node) chain(version, host string, vf int, extra map[string]any, middle ...map[string]any) *harness.Chain {
	plugins := append([]map[string]any{hostDevice(host)}, middle...)
	plugins = append(plugins, n.ours(vf, extra))
	return harness.NewChainWithCache(n.t, n.bins, n.cacheDir, harness.ConfList(version, network, plugins...))
}

func rt(id string, pod ns.NetNS) *libcni.RuntimeConf { return harness.Runtime(id, pod, "net1", nil) }

// records lists the attachment records in the state dir (temp files excluded).
func (n *node) records() []string {
	m, _ := filepath.Glob(filepath.Join(n.stateDir, "attachments", "*.json"))
	return m
}

// tempFiles lists temp files the atomic writer left in the records dir.
func (n *node) tempFiles() []string {
	m, _ := filepath.Glob(filepath.Join(n.stateDir, "attachments", ".tmp-*"))
	return m
}

func (n *node) store() *state.Store { return state.NewStore(n.stateDir) }

func (n *node) record(containerID, ifName string) *state.Record {
	r, err := n.store().Load(state.Key{Network: network, ContainerID: containerID, IfName: ifName})
	if err != nil {
		return nil
	}
	return r
}

func (n *node) logTail() string {
	b, _ := os.ReadFile(n.logFile)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// invocation is one exec of a CNI plugin binary the way a runtime runs it.
type invocation struct {
	Command, ContainerID, Netns, IfName string
	Stdin                               []byte
	Dir                                 string   // working directory ("" = a fresh temp dir)
	Env                                 []string // extra or overriding CNI_* variables
}

// outcome is what the plugin answered.
type outcome struct {
	Exit           int
	Err            *types.Error // decoded from stdout on failure
	Stdout, Stderr []byte
}

func (o outcome) String() string {
	if o.Err != nil {
		return fmt.Sprintf("exit %d code %d %q (%s)", o.Exit, o.Err.Code, o.Err.Msg, o.Err.Details)
	}
	return fmt.Sprintf("exit %d stdout %q stderr %q", o.Exit, o.Stdout, o.Stderr)
}

// cmd prepares the plugin run; the caller starts and waits.
func (n *node) cmd(ctx context.Context, inv invocation) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	c := exec.CommandContext(ctx, filepath.Join(n.bins, ours))
	c.Env = append([]string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND=" + inv.Command, "CNI_CONTAINERID=" + inv.ContainerID,
		"CNI_NETNS=" + inv.Netns, "CNI_IFNAME=" + inv.IfName, "CNI_PATH=" + n.bins, harness.RootsEnv(),
	}, inv.Env...)
	c.Stdin = bytes.NewReader(inv.Stdin)
	c.Dir = inv.Dir
	if c.Dir == "" {
		c.Dir = n.t.TempDir()
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	return c, &out, &errb
}

// execPlugin execs the plugin and decodes its answer; safe from any
// goroutine. A panic, a hang or a failure without a CNI error is an error.
func (n *node) execPlugin(inv invocation) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, out, errb := n.cmd(ctx, inv)
	err := c.Run()
	o := outcome{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if ctx.Err() != nil {
		return o, fmt.Errorf("%s did not finish within 30s", inv.Command)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		o.Exit = ee.ExitCode()
	} else if err != nil {
		return o, fmt.Errorf("exec %s: %w", ours, err)
	}
	if err := panicIn(o.Stderr); err != nil {
		return o, err
	}
	if o.Exit != 0 {
		o.Err = &types.Error{}
		if jerr := json.Unmarshal(o.Stdout, o.Err); jerr != nil {
			return o, fmt.Errorf("%s failed (exit %d) without a CNI error on stdout: %q, stderr %q", inv.Command, o.Exit, o.Stdout, o.Stderr)
		}
	}
	return o, nil
}

// run is execPlugin for the test goroutine: any such error is fatal.
func (n *node) run(inv invocation) outcome {
	n.t.Helper()
	o, err := n.execPlugin(inv)
	if err != nil {
		n.t.Fatalf("%v", err)
	}
	return o
}

// panicIn reports a Go panic or runtime crash in a plugin's stderr.
func panicIn(stderr []byte) error {
	for _, sign := range []string{"panic:", "goroutine ", "fatal error:", "SIGSEGV"} {
		if bytes.Contains(stderr, []byte(sign)) {
			return fmt.Errorf("plugin crashed (%q in stderr):\n%s", sign, stderr)
		}
	}
	return nil
}

// stdin renders our plugin's stdin as libcni would: the network's name and
// version, our entry, and prevResult.
func stdin(version string, conf map[string]any, prev types.Result) []byte {
	m := map[string]any{"cniVersion": version, "name": network}
	for k, v := range conf {
		m[k] = v
	}
	if prev != nil {
		m["prevResult"] = prev
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// prevFor is the result the plugin before us would hand over for a VF
// moved into pod as ifName.
func prevFor(pod ns.NetNS, ifName, mac string) *current.Result {
	return &current.Result{CNIVersion: "1.1.0", Interfaces: []*current.Interface{{Name: ifName, Mac: mac, Sandbox: pod.Path()}}}
}

// placeInPod moves a stand-in into pod as name, adds the altname there
// when withAlt, and brings it up (what host-device does, done directly so
// two pods can each hold a link that claims the same VF).
func placeInPod(t testing.TB, s *testutil.StandIn, pod ns.NetNS, name string, withAlt bool) netlink.Link {
	t.Helper()
	l, err := netlinksafe.LinkByName(s.Host)
	if err != nil {
		t.Fatalf("stand-in %s: %v", s.Host, err)
	}
	if err := netlink.LinkSetNsFd(l, int(pod.Fd())); err != nil {
		t.Fatalf("move %s into %s: %v", s.Host, pod.Path(), err)
	}
	var out netlink.Link
	err = pod.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(s.Host)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, name); err != nil {
			return err
		}
		if withAlt && !slices.Contains(l.Attrs().AltNames, s.AltName) {
			if err := netlink.LinkAddAltName(l, s.AltName); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		out, err = netlinksafe.LinkByName(name)
		return err
	})
	if err != nil {
		t.Fatalf("place %s in %s as %s: %v", s.Host, pod.Path(), name, err)
	}
	return out
}

// linkState is what a test compares of a link before and after.
type linkState struct {
	Name, MAC, Alias string
	Index, MTU       int
	Up               bool
	AltNames         string
}

// linkStates snapshots every link of a netns (nil: the current one).
func linkStates(t testing.TB, in ns.NetNS) []linkState {
	t.Helper()
	var out []linkState
	read := func() error {
		links, err := netlinksafe.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			a := l.Attrs()
			alt := slices.Clone(a.AltNames)
			sort.Strings(alt)
			out = append(out, linkState{Name: a.Name, MAC: a.HardwareAddr.String(), Alias: a.Alias, Index: a.Index, MTU: a.MTU,
				Up: a.Flags&1 != 0, AltNames: strings.Join(alt, ",")})
		}
		return nil
	}
	var err error
	if in == nil {
		err = read()
	} else {
		err = in.Do(func(ns.NetNS) error { return read() })
	}
	if err != nil {
		t.Fatalf("list links: %v", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// percentile of durations (p in 0..100), sorted in place.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p / 100)
	return d[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// envInt reads a positive size from the environment.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
