package kubecluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one of the cluster's daemons, run from the bin dir with its
// output appended to logs/<name>.log (kept in the work dir).
type proc struct {
	name   string
	args   []string
	binDir string
	log    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// newProc is a daemon of the bin dir, logging into the node's log dir.
func (c *Cluster) newProc(name string, args ...string) *proc {
	return &proc{name: name, args: args, binDir: c.cfg.BinDir, log: filepath.Join(c.Node.LogDir, name+".log")}
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
	cmd := exec.Command(filepath.Join(p.binDir, p.name), p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "PATH="+p.binDir+":/usr/sbin:/usr/bin:/sbin:/bin")
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
	return p.start()
}

// exitedEarly tells, with the end of its log, when the daemon is not
// running: what a readiness wait reports instead of waiting on, as Fatal.
func (p *proc) exitedEarly() error {
	if p.running() {
		return nil
	}
	return Fatal(fmt.Errorf("%s exited; the end of %s:\n%s", p.name, p.log, LastLines(ReadText(p.log), 30)))
}
