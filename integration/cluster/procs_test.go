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

// otherProcesses lists the processes of the PID namespace other than PID 1
// (the init stage) and this one.
func otherProcesses() []string {
	var out []string
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
	}
	return out
}
