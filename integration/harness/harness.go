// Package harness runs the plugin the way runtimes do — libcni executing
// the real binaries — inside private network and mount namespaces, with
// veth ends standing in for VFs and a fixture sysfs tree for the hardware.
// Integration tests, the demo and the agent's tests share it.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// TB is what the harness needs of a test (testing.TB fits).
type TB interface {
	sysfstest.TB
	Cleanup(func())
	Logf(format string, args ...any)
}

const privateEnv = "SRIOV_STABLE_PRIVATE_NS"

// InPrivateNamespaces reports whether this process already runs in the
// private namespaces Reexec sets up.
func InPrivateNamespaces() bool { return os.Getenv(privateEnv) == "1" }

// Reexec runs the current program again inside fresh network and mount
// namespaces (unshare --net --mount --fork), so nothing it does reaches the
// host's interfaces or mount table, and returns its exit code. Inside, it
// mounts a private tmpfs for netns bind mounts and brings lo up, and allows
// the plugin the fixture roots (see AllowRoots). ok is false when this
// process is the re-executed child and should go on.
func Reexec() (code int, ok bool, err error) {
	if InPrivateNamespaces() {
		AllowRoots(FixtureRoots()...)
		return 0, false, setupInside()
	}
	if os.Geteuid() != 0 {
		return 0, true, fmt.Errorf("needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces")
	}
	self, err := os.Executable()
	if err != nil {
		return 0, true, err
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--propagation", "private", "--fork", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateEnv+"=1")
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), true, nil
		}
		return 0, true, fmt.Errorf("unshare: %w", err)
	}
	return 0, true, nil
}

func setupInside() error {
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/run/netns", "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("mount private /run/netns: %w", err)
	}
	// The plugin's default state directory lives under /run/cni, and the
	// one it adopts records from (the old default) under /var/lib. Hide the
	// host's behind private tmpfs mounts (this mount namespace only), so no
	// input can reach them and a test can prove nothing was written there.
	// Only an empty /run/cni is made on the host when it has none.
	if err := os.MkdirAll("/run/cni", 0o755); err != nil {
		return err
	}
	for _, dir := range []string{"/run/cni", "/var/lib"} {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=755"); err != nil {
			return fmt.Errorf("mount private %s: %w", dir, err)
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// FixtureRoots are where the suites, the demo and the bench keep fixture
// sysfs trees, state dirs and plugin logs: the temp dir and the places a
// run points TMPDIR or the bench's -disk-dir at.
func FixtureRoots() []string { return []string{os.TempDir(), "/dev/shm", "/tmp", "/var/tmp"} }

// AllowRoots adds dirs to config.AllowedRootsEnv in this process's
// environment, as a node administrator adds roots in the runtime's, so the
// plugin honours stateDir, sysfsRoot and logFile there. libcni hands the
// environment to every plugin it runs; a plugin started with an
// environment of its own needs RootsEnv.
func AllowRoots(dirs ...string) {
	cur := os.Getenv(config.AllowedRootsEnv)
	for _, d := range dirs {
		if !slices.Contains(strings.Split(cur, ":"), d) {
			cur = strings.TrimPrefix(cur+":"+d, ":")
		}
	}
	os.Setenv(config.AllowedRootsEnv, cur)
}

// RootsEnv is the config.AllowedRootsEnv entry of this process's
// environment, for a plugin run with an environment of its own.
func RootsEnv() string { return config.AllowedRootsEnv + "=" + os.Getenv(config.AllowedRootsEnv) }

// RunPrivileged is the TestMain of a privileged suite: it re-executes the
// test binary in private namespaces and runs the tests there. Without root
// it skips the suite with the reason, except in CI (CI set), where that is
// a failure: CI must not skip the privileged suites.
func RunPrivileged(m interface{ Run() int }, suite string) int {
	code, parent, err := Reexec()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "privileged %s suite cannot run in CI: %v\n", suite, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIP privileged %s suite: %v\n", suite, err)
		return 0
	}
	if parent {
		return code
	}
	return m.Run()
}

// Bins returns the directory with sriov-stable-cni, host-device and the
// test plugins: $CNI_TEST_BIN_DIR (make sets it), else a fresh build.
func Bins(tb TB) string {
	tb.Helper()
	if dir := os.Getenv("CNI_TEST_BIN_DIR"); dir != "" {
		return dir
	}
	dir := tb.TempDir()
	for out, pkg := range map[string]string{
		"sriov-stable-cni": "./cmd/sriov-stable-cni",
		"host-device":      "github.com/containernetworking/plugins/plugins/main/host-device",
		"tuning":           "github.com/containernetworking/plugins/plugins/meta/tuning",
		"rename-as-udev":   "./integration/testplugins/rename-as-udev",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("build %s: %v\n%s", pkg, err, b)
		}
	}
	return dir
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// NewNetns makes a named network namespace removed at cleanup.
func NewNetns(tb TB) ns.NetNS {
	tb.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		tb.Fatalf("create netns: %v", err)
	}
	tb.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// RemoveNetns destroys a netns made by NewNetns now, as a pod sandbox
// teardown would; its path stops existing.
// The unmount is lazy (MNT_DETACH): a plugin being forked elsewhere holds
// every open file for a moment, and a plain unmount would fail with EBUSY.
func RemoveNetns(tb TB, n ns.NetNS) {
	tb.Helper()
	n.Close()
	if err := unix.Unmount(n.Path(), unix.MNT_DETACH); err != nil {
		tb.Fatalf("unmount netns %s: %v", n.Path(), err)
	}
	if err := os.Remove(n.Path()); err != nil {
		tb.Fatalf("remove netns %s: %v", n.Path(), err)
	}
}

// DeleteLinkIn deletes a link inside a netns.
func DeleteLinkIn(tb TB, n ns.NetNS, name string) {
	tb.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		tb.Fatalf("delete %s: %v", name, err)
	}
}

// StandIn is a veth pair standing in for one VF: Host is the end the
// chain moves into the pod (its altname is the plugin's stable name for
// PCI); the peer stays up in Wire, so the VF has carrier until the test
// takes the peer down.
type StandIn struct {
	Host    string
	PCI     string
	AltName string
	Wire    ns.NetNS
	Peer    string
}

// NewStandIn creates a stand-in in the current (private host) netns. With
// altName true it carries the stable altname, as the host's .link files
// would give it.
func NewStandIn(tb TB, host, pci string, altName bool) *StandIn {
	tb.Helper()
	wire := NewNetns(tb)
	s := &StandIn{Host: host, PCI: pci, AltName: "vf-" + config.PCIToName(pci), Wire: wire, Peer: "w" + host}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: s.Peer, PeerNamespace: netlink.NsFd(int(wire.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		tb.Fatalf("create stand-in %s: %v", host, err)
	}
	tb.Cleanup(func() {
		// Deleting the peer removes whichever end is left, wherever it is.
		_ = wire.Do(func(ns.NetNS) error {
			if l, err := netlink.LinkByName(s.Peer); err == nil {
				return netlink.LinkDel(l)
			}
			return nil
		})
	})
	l, err := netlink.LinkByName(host)
	if err != nil {
		tb.Fatalf("stand-in %s: %v", host, err)
	}
	if altName {
		if err := netlink.LinkAddAltName(l, s.AltName); err != nil {
			tb.Fatalf("altname on %s: %v", host, err)
		}
	}
	s.SetCarrier(tb, true)
	return s
}

// SetCarrier brings the wire end up or down, giving or taking the VF's carrier.
func (s *StandIn) SetCarrier(tb TB, up bool) {
	tb.Helper()
	err := s.Wire.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(s.Peer)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		tb.Fatalf("set carrier of %s: %v", s.Host, err)
	}
}

// Chain is a conflist run through libcni with the real binaries.
type Chain struct {
	CNI  *libcni.CNIConfig
	List *libcni.NetworkConfigList
}

// NewChain parses a conflist and prepares libcni with its own cache dir.
func NewChain(tb TB, binDir string, conflist []byte) *Chain {
	tb.Helper()
	return NewChainWithCache(tb, binDir, tb.TempDir(), conflist)
}

// NewChainWithCache is NewChain with a given libcni cache dir, so several
// chains share one runtime's view (as GC needs).
func NewChainWithCache(tb TB, binDir, cacheDir string, conflist []byte) *Chain {
	tb.Helper()
	list, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		tb.Fatalf("parse conflist: %v\n%s", err, conflist)
	}
	return &Chain{CNI: libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, nil), List: list}
}

// Only returns the same network (name, version, libcni cache) with just
// the plugins of the given types: how a test runs CHECK or DEL of our
// plugin alone when the upstream plugin before it would stop the chain
// first (host-device's CHECK fails on a renamed link and its DEL is not
// idempotent; sriov-cni's CHECK is a no-op).
func (c *Chain) Only(pluginTypes ...string) *Chain {
	list := *c.List
	list.Plugins = nil
	for _, p := range c.List.Plugins {
		if slices.Contains(pluginTypes, p.Network.Type) {
			list.Plugins = append(list.Plugins, p)
		}
	}
	return &Chain{CNI: c.CNI, List: &list}
}

// Runtime builds the runtime arguments for one attachment.
func Runtime(containerID string, netns ns.NetNS, ifName string, caps map[string]any) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: containerID, NetNS: netns.Path(), IfName: ifName, CapabilityArgs: caps}
}

// Add runs ADD for the chain.
func (c *Chain) Add(rt *libcni.RuntimeConf) (types.Result, error) {
	return c.CNI.AddNetworkList(context.Background(), c.List, rt)
}

// Check runs CHECK for the chain.
func (c *Chain) Check(rt *libcni.RuntimeConf) error {
	return c.CNI.CheckNetworkList(context.Background(), c.List, rt)
}

// Del runs DEL for the chain.
func (c *Chain) Del(rt *libcni.RuntimeConf) error {
	return c.CNI.DelNetworkList(context.Background(), c.List, rt)
}

// ConfList renders a conflist from plugin maps.
func ConfList(cniVersion, name string, plugins ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": name, "plugins": plugins})
	return b
}

// ErrCode returns the CNI error code of err (libcni wraps it), or 0.
func ErrCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// LinksIn lists link names in a netns.
func LinksIn(tb TB, n ns.NetNS) []string {
	tb.Helper()
	var names []string
	err := n.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if err != nil {
		tb.Fatalf("list links: %v", err)
	}
	return names
}

// LinkIn returns a link by name in a netns, nil if absent.
func LinkIn(tb TB, n ns.NetNS, name string) netlink.Link {
	tb.Helper()
	var link netlink.Link
	_ = n.Do(func(ns.NetNS) error {
		link, _ = netlink.LinkByName(name)
		return nil
	})
	return link
}

// RenameIn renames a link inside a netns, as udev would.
func RenameIn(tb TB, n ns.NetNS, from, to string) {
	tb.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(from)
		if err != nil {
			return err
		}
		up := l.Attrs().Flags&1 != 0
		if up {
			_ = netlink.LinkSetDown(l)
		}
		if err := netlink.LinkSetName(l, to); err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("rename %s to %s: %v", from, to, err)
	}
}

// HostLink returns a link of the current (private host) netns, nil if absent.
func HostLink(name string) netlink.Link {
	l, _ := netlink.LinkByName(name)
	return l
}

// Describe is a short dump of a link for failure messages.
func Describe(l netlink.Link) string {
	if l == nil {
		return "<none>"
	}
	a := l.Attrs()
	return fmt.Sprintf("%s(mac=%s mtu=%d altnames=%s alias=%s)", a.Name, a.HardwareAddr, a.MTU, strings.Join(a.AltNames, ","), a.Alias)
}

// Exec runs a plugin binary directly, as a runtime does (CNI_* environment,
// config on stdin), and returns its stdout and the CNI error code it
// printed (0 on success).
func Exec(tb TB, plugin, command, containerID, netns, ifName string, stdin []byte) (string, uint) {
	tb.Helper()
	cmd := exec.Command(plugin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + netns,
		"CNI_IFNAME=" + ifName, "CNI_PATH=" + filepath.Dir(plugin), "PATH=/usr/sbin:/usr/bin:/sbin:/bin", RootsEnv()}
	cmd.Stdin = strings.NewReader(string(stdin))
	out, err := cmd.Output()
	if err == nil {
		return string(out), 0
	}
	var e types.Error
	if jerr := json.Unmarshal(out, &e); jerr != nil {
		tb.Fatalf("%s %s: %v, output not a CNI error: %s", plugin, command, err, out)
	}
	return string(out), e.Code
}

// Merge returns base with extra's keys set in it; a nil value in extra
// deletes the key. Tests use it to vary one plugin entry.
func Merge(base, extra map[string]any) map[string]any {
	for k, v := range extra {
		if v == nil {
			delete(base, k)
			continue
		}
		base[k] = v
	}
	return base
}

// Parallel runs f(0..n-1) at once, reports each failure as "verb i: err"
// and returns the wall time of the whole batch.
func Parallel(tb interface{ Errorf(string, ...any) }, n int, verb string, f func(i int) error) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tb.Errorf("%s %d: %v", verb, i, err)
		}
	}
	return time.Since(start)
}
