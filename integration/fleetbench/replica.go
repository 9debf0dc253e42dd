package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// replica is one fabric controller: the real binary, sriov-stable-agent
// fabric, as the shipped Deployment runs it (its defaults), with the
// admin's kubeconfig.
type replica struct {
	id     string
	listen string
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
}

// startReplica runs the controller; its log goes to logDir.
func startReplica(agent, kubeconfig, leaseNS, id, listen, logPath string) (*replica, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(agent, "fabric", "--kubeconfig", kubeconfig, "--lease-namespace", leaseNS,
		"--identity", id, "--listen", listen)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start the fabric controller %s: %w", id, err)
	}
	r := &replica{id: id, listen: listen, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(r.done)
	}()
	return r, nil
}

func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// stop ends the replica with sig and waits up to grace (then SIGKILL,
// which is an error).
func (r *replica) stop(sig syscall.Signal, grace time.Duration) error {
	if r.exited() {
		return nil
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
		return nil
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("the fabric controller %s did not stop within %s of %v", r.id, grace, sig)
	}
}

// metrics reads the replica's /metrics into name → value (unlabelled
// samples, and labelled ones under their full text).
func (r *replica) metrics(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.listen+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics of %s: %s", r.id, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// memory is the replica's resident set now and at its peak (VmRSS and
// VmHWM of /proc/PID/status), in bytes.
func (r *replica) memory() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", r.cmd.Process.Pid, k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM", r.cmd.Process.Pid)
	}
	return rss, peak, nil
}
