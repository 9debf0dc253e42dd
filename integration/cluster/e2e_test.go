//go:build clustere2e

package cluster

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	binDir      = flag.String("cluster.bin", "", "directory with every binary build.sh built (required)")
	workDir     = flag.String("cluster.work", "", "this run's directory: logs, the pod logs of /var/log (required)")
	imageDir    = flag.String("cluster.images", "", "directory with the make image outputs (binaries and archive) of version a and version b in a/ and b/ (required)")
	imageName   = flag.String("cluster.image", "ghcr.io/sriov-stable-cni/sriov-stable-cni", "name of the project image in the archives")
	versionA    = flag.String("cluster.version-a", "", "version (and tag) of image-a.tar, the one first deployed (required)")
	versionB    = flag.String("cluster.version-b", "", "version (and tag) of image-b.tar, the upgrade (required)")
	nadCRD      = flag.String("cluster.nad-crd", "", "the NetworkAttachmentDefinition CRD (network-attachment-definition-client's artifacts/networks-crd.yaml) (required)")
	repoRoot    = flag.String("cluster.repo", defaultRepoRoot(), "the repository (for deploy/daemonset)")
	churnCycles = flag.Int("cluster.churn-cycles", 100, "pod create/delete cycles of the churn scenario")
	latencyPods = flag.Int("cluster.latency-pods", 20, "pods per NAD in the pod start latency figure")
)

func defaultRepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// The test binary runs in three stages, told apart by stageEnv:
//   - on the host (unset): checks its inputs, re-executes itself under
//     unshare in new network, mount and PID namespaces, and afterwards
//     checks that nothing of the run is left on the host;
//   - stageInit: PID 1 of the new PID namespace; runs stageRun as its child
//     and reaps every orphan (containerd's shims reparent to it). When it
//     exits, the kernel kills whatever is left in the namespace;
//   - stageRun: builds the node, starts the cluster, runs the tests, tears
//     the cluster down and checks the teardown.
const (
	stageEnv  = "SRIOV_CLUSTER_E2E_STAGE"
	stageInit = "init"
	stageRun  = "run"
)

func TestMain(m *testing.M) {
	flag.Parse()
	switch os.Getenv(stageEnv) {
	case "":
		os.Exit(onHost())
	case stageInit:
		os.Exit(initProcess())
	case stageRun:
		os.Exit(runCluster(m))
	default:
		fmt.Fprintf(os.Stderr, "cluster e2e: unknown %s=%q\n", stageEnv, os.Getenv(stageEnv))
		os.Exit(2)
	}
}

func checkFlags() error {
	var missing []string
	for name, v := range map[string]string{"cluster.bin": *binDir, "cluster.work": *workDir, "cluster.images": *imageDir,
		"cluster.version-a": *versionA, "cluster.version-b": *versionB, "cluster.nad-crd": *nadCRD} {
		if v == "" {
			missing = append(missing, "-"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (integration/cluster/run.sh passes them)", strings.Join(missing, ", "))
	}
	if *versionA == *versionB {
		return fmt.Errorf("-cluster.version-a and -cluster.version-b are both %q: the upgrade needs two versions", *versionA)
	}
	return nil
}

// onHost re-executes the binary in private namespaces and then checks the
// host: no process in the run's namespaces, no mount of the run, no cgroup
// of its pods.
func onHost() int {
	if err := checkFlags(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 2
	}
	if os.Geteuid() != 0 {
		// Never skipped: make cluster-e2e runs as root, CI too.
		fmt.Fprintln(os.Stderr, "cluster e2e: needs root (namespaces, mounts, cgroups)")
		return 1
	}
	if err := os.MkdirAll(*workDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	before, err := hostMounts()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--pid", "--fork", "--mount-proc",
		"--propagation", "private", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = withStage(stageInit)
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "cluster e2e: unshare: %v\n", err)
			return 1
		}
		code = ee.ExitCode()
	}
	leftovers := hostLeftovers(before)
	// A run that died before its teardown leaves its (now empty) cgroups:
	// they count as left behind, and are removed for the next run.
	if err := removeCgroupRoot(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
	}
	for _, l := range leftovers {
		fmt.Fprintf(os.Stderr, "cluster e2e: left on the host: %s\n", l)
	}
	fmt.Printf("cluster e2e: host check: %d processes, mounts, namespaces or cgroups of the run left behind\n", len(leftovers))
	if len(leftovers) > 0 && code == 0 {
		code = 1
	}
	return code
}

// withStage is the environment with stageEnv set to stage (replaced, not
// appended: a process reads the first of two).
func withStage(stage string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, stageEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, stageEnv+"="+stage)
}

// initProcess is PID 1 of the cluster's PID namespace: it starts the run
// stage, forwards SIGINT and SIGTERM to it, reaps every process that ends
// up its child, and exits with the run stage's code.
func initProcess() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e init: %v\n", err)
		return 1
	}
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "cluster e2e init: running as pid %d, not as PID 1 of a new PID namespace\n", os.Getpid())
		return 1
	}
	env := withStage(stageRun)
	pid, err := syscall.ForkExec(self, os.Args, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e init: start the run stage: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster e2e init: wait: %v\n", err)
			return 1
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			fmt.Fprintf(os.Stderr, "cluster e2e init: the run stage died of %v\n", ws.Signal())
			return 1
		}
		return ws.ExitStatus()
	}
}

// runCluster is the run stage: node, cluster, tests, teardown.
func runCluster(m *testing.M) int {
	start := time.Now()
	c, err := newCluster()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		c.teardown()
		return 1
	}
	theCluster = c
	figf("cluster", "up (etcd, containerd, control plane, kubelet, node Ready, images imported)", "%.1f s", c.upTook.Seconds())
	code := m.Run()
	// TestZTeardown tears down and checks; this covers a run filtered by
	// -test.run or stopped by a fatal error.
	if err := c.teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: teardown: %v\n", err)
		code = 1
	}
	figf("cluster", "whole run inside the namespaces", "%.1f s", time.Since(start).Seconds())
	printFigures()
	return code
}
