// Package nodecheck is the agent's node-check source: it runs the node
// doctor on its own interval and, between its runs, the free-VF port
// watcher (package portwatch), which reads every RDMA port the host sees
// each second and runs the doctor's port checks again when one changed.
// The report it publishes is the doctor's last with the port watcher's
// newer word on ports; it logs each finding that appears or clears once
// and hands every report to its notifiers (the Kubernetes reporter) and
// its snapshot to the Prometheus exporter.
package nodecheck

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/portwatch"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// DefaultInterval is the time between two doctor runs.
const DefaultInterval = 5 * time.Minute

// Notifier hears every completed doctor run's report and every port
// change merged into it, in the order they were made, one at a time.
type Notifier interface {
	Doctor(rep *doctor.Report)
}

// Config says what to check and how often.
type Config struct {
	Doctor doctor.Options
	// Interval between two doctor runs; zero means DefaultInterval.
	Interval time.Duration
	// PortInterval: zero means portwatch.DefaultInterval; negative turns
	// the port watcher off (ports then wait for the doctor's runs).
	PortInterval time.Duration
	// StuckAfter is how long a doctor run may take before /healthz names
	// it; zero means 30 s.
	StuckAfter time.Duration
	Logger     *slog.Logger
	Notifiers  []Notifier
}

// Checker runs the node checks.
type Checker struct {
	cfg  Config
	log  *slog.Logger
	busy status.Busy

	// publishMu keeps the notifiers hearing reports in the order they
	// were made: the doctor's loop and the port watcher both publish.
	publishMu sync.Mutex

	mu       sync.Mutex
	rep      *doctor.Report // the doctor's last
	repStart time.Time      // when the run of rep began
	err      error
	at       time.Time
	ports    *doctor.PortReport // the port watcher's last
	node     *doctor.Report     // rep with ports' newer word: what is published
	known    map[string]doctor.Finding
}

// New returns a checker; nothing runs until Run or RunOnce.
func New(cfg Config) (*Checker, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 0 {
		return nil, errors.New("doctor interval is negative")
	}
	if cfg.PortInterval == 0 {
		cfg.PortInterval = portwatch.DefaultInterval
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{cfg: cfg, log: cfg.Logger, known: map[string]doctor.Finding{}}, nil
}

// Run runs the doctor now and every interval, and the port watcher, until
// ctx ends. A doctor run still under way is not started again; Run
// returns when ctx ends even while a run or a port read blocks in the
// kernel (the goroutine stuck in it ends when the read does).
func (c *Checker) Run(ctx context.Context) {
	if c.cfg.PortInterval > 0 {
		w := portwatch.New(portwatch.Config{Doctor: c.cfg.Doctor, Interval: c.cfg.PortInterval,
			Changed: c.portsChanged, Logger: c.log})
		// Not waited for: a port read that never returns (a wedged HCA)
		// stalls the port watch alone.
		go w.Run(ctx)
	}
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if started, _ := c.busy.RunBounded(ctx.Done(), 0, c.RunOnce); !started {
			c.log.Debug("node doctor still running from an earlier interval")
		}
	}, c.cfg.Interval)
}

// RunOnce runs the doctor once and publishes its report.
func (c *Checker) RunOnce() {
	started := time.Now()
	rep, err := doctor.Run(c.cfg.Doctor)
	c.mu.Lock()
	c.at = time.Now()
	if err != nil {
		if c.err == nil || c.err.Error() != err.Error() {
			c.log.Error("node doctor cannot run", "err", err)
		}
		c.err = err
		c.mu.Unlock()
		return
	}
	c.rep, c.repStart, c.err = rep, started, nil
	c.mu.Unlock()
	c.publish()
}

// portsChanged is the port watcher's Changed: its report is published at
// once, merged into the doctor's last one (none yet: the first doctor run
// publishes it).
func (c *Checker) portsChanged(p *doctor.PortReport) {
	c.mu.Lock()
	c.ports = p
	ready := c.rep != nil
	c.mu.Unlock()
	if ready {
		c.publish()
	}
}

// publish makes the node report, logs the findings that appeared or went
// away since the last one published, and tells the notifiers.
func (c *Checker) publish() {
	c.publishMu.Lock()
	defer c.publishMu.Unlock()
	c.mu.Lock()
	rep := c.rep.WithPorts(c.repStart, c.ports)
	c.node = rep
	now := map[string]doctor.Finding{}
	for _, f := range rep.Findings {
		now[f.Check+"\x00"+f.Subject+"\x00"+string(f.Severity)] = f
	}
	known := c.known
	c.known = now
	c.mu.Unlock()
	for _, k := range sortedKeys(now) {
		if _, ok := known[k]; !ok && now[k].Severity != doctor.SeverityInfo {
			f := now[k]
			c.log.Warn("node doctor finding", "check", f.Check, "severity", string(f.Severity), "subject", f.Subject, "message", f.Message, "remedy", f.Remedy)
		}
	}
	for _, k := range sortedKeys(known) {
		if _, ok := now[k]; !ok && known[k].Severity != doctor.SeverityInfo {
			f := known[k]
			c.log.Info("node doctor finding cleared", "check", f.Check, "severity", string(f.Severity), "subject", f.Subject)
		}
	}
	for _, n := range c.cfg.Notifiers {
		n.Doctor(rep)
	}
}

// Snapshot returns the last run's time and error and the report last
// published.
func (c *Checker) Snapshot() status.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return status.Node{At: c.at, Err: c.err, Report: c.node}
}

// Stuck names a doctor run that has taken longer than StuckAfter, for
// /healthz.
func (c *Checker) Stuck(now time.Time) []string {
	if d, ok := c.busy.Running(now); ok && d >= c.cfg.StuckAfter {
		return []string{"stuck: the node doctor has been running for " + status.RoundDur(d)}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
