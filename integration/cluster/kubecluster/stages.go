package kubecluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A program using the cluster (the e2e's test binary) runs in three
// stages, told apart by stageEnv:
//   - on the host (unset): re-executes itself under unshare in new
//     network, mount and PID namespaces, and afterwards checks that nothing
//     of the run is left on the host;
//   - stageInit: PID 1 of the new PID namespace; runs stageRun as its child
//     and reaps every orphan (containerd's shims reparent to it). When it
//     exits, the kernel kills whatever is left in the namespace;
//   - stageRun: the caller's own: Start, the tests, Teardown.
const (
	stageEnv  = "SRIOV_CLUSTER_E2E_STAGE"
	stageInit = "init"
	stageRun  = "run"
)

// Run runs inside, the run stage, in private network, mount and PID
// namespaces, and returns the code to exit with: inside's, or a failure of
// the stages around it. The program (a TestMain) calls it first thing,
// with the same arguments in every stage: each stage re-executes the
// program with its arguments. On the host it needs root, and cfg's BinDir
// and WorkDir for the host check.
func Run(cfg Config, inside func() int) int {
	switch os.Getenv(stageEnv) {
	case "":
		return onHost(cfg)
	case stageInit:
		return initProcess()
	case stageRun:
		return inside()
	default:
		fmt.Fprintf(os.Stderr, "cluster e2e: unknown %s=%q\n", stageEnv, os.Getenv(stageEnv))
		return 2
	}
}

// onHost re-executes the program in private namespaces and then checks the
// host: no process in the run's namespaces, no mount of the run, no cgroup
// of its pods.
func onHost(cfg Config) int {
	if os.Geteuid() != 0 {
		// Never skipped: make cluster-e2e runs as root, CI too.
		fmt.Fprintln(os.Stderr, "cluster e2e: needs root (namespaces, mounts, cgroups)")
		return 1
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	before, err := hostMounts()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	code, err := runUnshared()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	leftovers := hostLeftovers(before, cfg.WorkDir, cfg.BinDir)
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

// runUnshared runs the program again as the init stage in new namespaces
// and returns its exit code.
func runUnshared() (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--pid", "--fork", "--mount-proc",
		"--propagation", "private", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = withStage(stageInit)
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), nil
	case err != nil:
		return 0, fmt.Errorf("unshare: %w", err)
	}
	return 0, nil
}

// inRunStage tells, by an error, when this process is not the run stage:
// its stage variable is not stageRun, or PID 1 of its PID namespace is not
// this program (the init stage), as on the host.
func inRunStage() error {
	if os.Getenv(stageEnv) != stageRun {
		return fmt.Errorf("not in the run stage of kubecluster.Run (%s=%q)", stageEnv, os.Getenv(stageEnv))
	}
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return err
	}
	if init, err := os.Readlink("/proc/1/exe"); err != nil || init != self {
		return fmt.Errorf("PID 1 of this PID namespace is not the init stage %s (%q, %v): not in the run's namespaces", self, init, err)
	}
	return nil
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
	pid, err := syscall.ForkExec(self, os.Args, &syscall.ProcAttr{Env: withStage(stageRun), Files: []uintptr{0, 1, 2}})
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
