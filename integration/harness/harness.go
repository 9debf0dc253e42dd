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
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
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
		testutil.AllowRoots(testutil.FixtureRoots()...)
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
	lo, err := netlinksafe.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
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
