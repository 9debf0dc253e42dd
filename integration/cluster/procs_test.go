//go:build clustere2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one of the cluster's daemons, run from the bin dir with its
// output appended to logs/<name>.log (kept in the work dir).
type proc struct {
	name string
	args []string
	env  []string
	log  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	restarts int
}

func newProc(logDir, name string, args ...string) *proc {
	return &proc{name: name, args: args, log: filepath.Join(logDir, name+".log")}
}

// start runs the daemon; it fails if it is already running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n==== %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.name, strings.Join(p.args, " "))
	cmd := exec.Command(filepath.Join(*binDir, p.name), p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(append(os.Environ(), "PATH="+*binDir+":/usr/sbin:/usr/bin:/sbin:/bin"), p.env...)
	// Its own process group: a signal meant for the test never reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// running reports whether the daemon is up (it may have exited by itself).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. A daemon that
// already exited is only waited for.
func (p *proc) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("%s did not stop within %v of SIGTERM: killed", p.name, grace)
}

// restart stops and starts the daemon again.
func (p *proc) restart(grace time.Duration) error {
	if err := p.stop(grace); err != nil {
		return err
	}
	p.restarts++
	return p.start()
}

// exitedEarly tells, with the end of its log, when the daemon is not
// running: what a readiness wait reports instead of waiting on.
func (p *proc) exitedEarly() error {
	if p.running() {
		return nil
	}
	return fmt.Errorf("%s exited; the end of %s:\n%s", p.name, p.log, tail(p.log, 30))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string { return lastLines(readFile(path), n) }

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every interval until it returns true, it returns an
// error, ctx ends or timeout passes; a non-nil early error (a daemon that
// exited) ends the wait at once.
func waitFor(timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		var fatal fatalErr
		if errors.As(err, &fatal) {
			return fmt.Errorf("%s: %w", what, fatal.error)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not within %v: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-time.After(interval):
		}
	}
}

// fatalErr ends a waitFor at once.
type fatalErr struct{ error }

// process is one process of the PID namespace, as /proc shows it.
type process struct {
	pid, ppid int
	exe       string // the resolved executable ("" when unreadable)
	cmdline   string
}

func (p process) String() string {
	return fmt.Sprintf("%d (parent %d) %s", p.pid, p.ppid, p.cmdline)
}

// otherProcesses lists the processes of the PID namespace other than PID 1
// (the init stage) and this one.
func otherProcesses() []process {
	var out []process
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		p := process{pid: pid, ppid: parentPID(dir), exe: exe,
			cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")}
		out = append(out, p)
	}
	return out
}

// parentPID reads the parent's PID from /proc/<pid>/stat (the field after
// the parenthesized command name, which may itself hold spaces).
func parentPID(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "stat"))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// shimBinary is the runtime shim containerd starts per sandbox.
const shimBinary = "containerd-shim-runc-v2"

// isKnownShim tells a shim of this cluster's containerd: the e2e's own
// containerd-shim-runc-v2 serving the CRI's namespace k8s.io.
func isKnownShim(p process) bool {
	want, err := filepath.EvalSymlinks(filepath.Join(*binDir, shimBinary))
	return err == nil && p.exe == want && strings.Contains(" "+p.cmdline+" ", " -namespace k8s.io ")
}

// sortLeftovers splits what is left once every component stopped into
// the known shims, the processes under them (the containers they run,
// pause included) and anything else, which no teardown should find.
func sortLeftovers(procs []process) (shims, containers, unknown []process) {
	byPID := map[int]process{}
	for _, p := range procs {
		byPID[p.pid] = p
	}
	underShim := func(p process) bool {
		for seen := 0; p.ppid > 1 && seen < len(procs); seen++ {
			parent, ok := byPID[p.ppid]
			if !ok {
				return false
			}
			if isKnownShim(parent) {
				return true
			}
			p = parent
		}
		return false
	}
	for _, p := range procs {
		switch {
		case isKnownShim(p):
			shims = append(shims, p)
		case underShim(p):
			containers = append(containers, p)
		default:
			unknown = append(unknown, p)
		}
	}
	return shims, containers, unknown
}

// joinProcs lists processes on one line.
func joinProcs(ps []process) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, "; ")
}
