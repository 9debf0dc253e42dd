// Package monitor is the sriov-stable-agent's drift monitor: every interval
// it runs CHECK's drift checks against every attachment ADD recorded, marks
// attachments whose network namespace vanished as stale and removes their
// records after a grace period, runs the node doctor, and exports all of it
// as Prometheus metrics. It needs no Kubernetes API server.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Status is what the last sweep concluded about an attachment.
type Status string

// Attachment statuses; the values are metric label values.
const (
	StatusOK      Status = "ok"      // checked, no drift
	StatusDrifted Status = "drifted" // checked, at least one drift reason
	StatusStale   Status = "stale"   // its network namespace is gone; the record goes after the grace period
	StatusUnknown Status = "unknown" // the check failed or timed out; drift reasons are the last known ones
)

// Statuses lists every status, for metrics that must show zeros.
var Statuses = []Status{StatusOK, StatusDrifted, StatusStale, StatusUnknown}

// Defaults for Config fields left zero.
const (
	DefaultInterval       = 30 * time.Second
	DefaultCheckTimeout   = 5 * time.Second
	DefaultStaleGrace     = 10 * time.Minute
	DefaultConcurrency    = 4
	DefaultDoctorInterval = 5 * time.Minute
)

// Config says what to watch and how often.
type Config struct {
	StateDir  string // the plugin's stateDir
	SysfsRoot string // where the host's sysfs is mounted
	Interval  time.Duration
	// CheckTimeout bounds one attachment's check; one slow or stuck netns
	// must not stall the sweep. Zero means min(DefaultCheckTimeout, Interval/2).
	CheckTimeout time.Duration
	// StaleGrace is how long a record whose netns vanished is kept: the
	// runtime's DEL normally removes it first.
	StaleGrace time.Duration
	// Concurrency is how many attachments are checked at once.
	Concurrency int
	// Doctor, when set, runs the node doctor every DoctorInterval.
	Doctor         *doctor.Options
	DoctorInterval time.Duration
	Logger         *slog.Logger
	// Notifiers hear of each change after the log and metrics have it.
	Notifiers []Notifier
}

// Notifier hears of what the monitor concludes, as it changes: the node
// agent's Kubernetes reporter is one (pod events, node condition, device
// taints). Calls come from the monitor's goroutines, never under its lock,
// one at a time per kind; a notifier that talks to a remote API must queue
// and return at once, since a slow call delays the next sweep.
type Notifier interface {
	// Drift is called when an attachment's drift reasons change: the
	// reasons newly seen, with their details, and those that cleared.
	Drift(rec *state.Record, appeared []drift.Finding, cleared []drift.Reason)
	// Repaired is called after the monitor put an attachment right: kind
	// names the repair, detail says what changed.
	Repaired(rec *state.Record, kind, detail string)
	// Doctor is called after every completed doctor run with its report.
	Doctor(rep *doctor.Report)
}

func (c *Config) applyDefaults() error {
	if c.StateDir == "" {
		return errors.New("state directory is empty")
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < 0 {
		return fmt.Errorf("interval %s is negative", c.Interval)
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = min(DefaultCheckTimeout, c.Interval/2)
	}
	if c.CheckTimeout <= 0 || c.CheckTimeout > c.Interval {
		return fmt.Errorf("check timeout %s must be positive and at most the interval %s", c.CheckTimeout, c.Interval)
	}
	if c.StaleGrace == 0 {
		c.StaleGrace = DefaultStaleGrace
	}
	if c.StaleGrace < 0 {
		return fmt.Errorf("stale grace %s is negative", c.StaleGrace)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.DoctorInterval == 0 {
		c.DoctorInterval = DefaultDoctorInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// attachment is the monitor's memory of one record between sweeps.
type attachment struct {
	rec        *state.Record
	status     Status
	drift      map[drift.Reason]string // current drift reasons → detail
	staleSince time.Time
	lastErr    string
}

// Monitor watches the attachments of one state directory.
type Monitor struct {
	cfg   Config
	store *state.Store
	sys   sysfs.Reader
	log   *slog.Logger
	met   *metrics

	mu          sync.Mutex
	atts        map[state.Key]*attachment
	inflight    map[state.Key]time.Time // checks still running, possibly past their timeout
	started     time.Time
	lastSweep   time.Time // end of the last completed sweep
	lastTook    time.Duration
	listErr     error // the state dir could not be listed at all
	readErrs    int   // record files that could not be read
	doctorRep   *doctor.Report
	doctorErr   error
	doctorAt    time.Time
	doctorKnown map[string]doctor.Finding // check/subject → finding, for logging changes once
}

// New validates cfg and returns a monitor; nothing runs until Run or Sweep.
func New(cfg Config) (*Monitor, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, fmt.Errorf("monitor configuration: %w", err)
	}
	m := &Monitor{
		cfg:         cfg,
		store:       state.NewStore(cfg.StateDir),
		sys:         sysfs.Reader{Root: cfg.SysfsRoot},
		log:         cfg.Logger,
		atts:        map[state.Key]*attachment{},
		inflight:    map[state.Key]time.Time{},
		started:     time.Now(),
		doctorKnown: map[string]doctor.Finding{},
	}
	m.met = newMetrics(m)
	return m, nil
}

// Run sweeps every interval, and runs the doctor every doctor interval,
// until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	m.log.Info("drift monitor started", "stateDir", m.cfg.StateDir, "sysfsRoot", m.cfg.SysfsRoot,
		"interval", m.cfg.Interval, "checkTimeout", m.cfg.CheckTimeout, "staleGrace", m.cfg.StaleGrace)
	var wg sync.WaitGroup
	if m.cfg.Doctor != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.every(ctx, m.cfg.DoctorInterval, m.RunDoctor)
		}()
	}
	m.every(ctx, m.cfg.Interval, m.Sweep)
	wg.Wait()
}

// every runs fn now and then each period until ctx ends; a run longer than
// the period delays the next one rather than overlapping it.
func (m *Monitor) every(ctx context.Context, period time.Duration, fn func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// outcome is one attachment's check result.
type outcome struct {
	findings []drift.Finding
	err      error
	timedOut bool
}

// Sweep checks every recorded attachment once, each bounded by the check
// timeout, and updates the monitor's view, logs and metrics.
func (m *Monitor) Sweep(ctx context.Context) {
	start := time.Now()
	recs, err := m.store.List()
	listFailed := err != nil && countReadErrors(err) == 0
	outcomes := make([]outcome, len(recs))
	sem := make(chan struct{}, m.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			outcomes[i] = m.check(ctx, rec)
		}()
	}
	wg.Wait()
	now := time.Now()
	expired, notes := m.apply(recs, outcomes, now)
	for _, note := range notes {
		note()
	}
	for _, a := range expired {
		m.removeStale(a)
	}
	took := time.Since(start)
	m.mu.Lock()
	prevListErr := m.listErr
	if listFailed {
		m.listErr = err
	} else {
		m.listErr = nil
		m.readErrs = countReadErrors(err)
	}
	m.lastSweep, m.lastTook = time.Now(), took
	m.mu.Unlock()
	switch {
	case listFailed && (prevListErr == nil || prevListErr.Error() != err.Error()):
		m.log.Error("cannot list attachment records", "stateDir", m.cfg.StateDir, "err", err)
	case !listFailed && err != nil:
		m.log.Debug("some attachment records are unreadable", "err", err)
	case !listFailed && prevListErr != nil:
		m.log.Info("attachment records readable again", "stateDir", m.cfg.StateDir)
	}
	m.met.sweeps.Inc()
	m.log.Debug("sweep done", "attachments", len(recs), "took", took)
}

// check runs the drift checks of one record in its own goroutine and waits
// at most the check timeout. A check can block in the kernel, where it
// cannot be cancelled: a netlink request waiting for the RTNL lock a slow
// driver holds, a sysfs read of a wedged device. One that outlives its
// timeout keeps its goroutine; until it returns, later sweeps do not start
// another one for the same record.
func (m *Monitor) check(ctx context.Context, rec *state.Record) outcome {
	key := rec.Key()
	m.mu.Lock()
	if since, busy := m.inflight[key]; busy {
		m.mu.Unlock()
		return outcome{err: fmt.Errorf("an earlier check, started %s, is still running (netns %s)", since.Format(time.RFC3339), rec.Netns), timedOut: true}
	}
	m.inflight[key] = time.Now()
	m.mu.Unlock()

	done := make(chan outcome, 1)
	go func() {
		findings, err := drift.Detect(rec, m.sys)
		m.mu.Lock()
		delete(m.inflight, key)
		m.mu.Unlock()
		done <- outcome{findings: findings, err: err}
	}()
	timer := time.NewTimer(m.cfg.CheckTimeout)
	defer timer.Stop()
	select {
	case o := <-done:
		return o
	case <-timer.C:
		m.met.timeouts.Inc()
		return outcome{err: fmt.Errorf("check timed out after %s (netns %s)", m.cfg.CheckTimeout, rec.Netns), timedOut: true}
	case <-ctx.Done():
		return outcome{err: ctx.Err(), timedOut: true}
	}
}

// apply folds one sweep's outcomes into the monitor's view and logs every
// change once: a new drift reason, its recovery, a vanished netns, a check
// that starts or stops failing. It returns the stale records past grace,
// and the notifier calls for the caller to make once the lock is released.
func (m *Monitor) apply(recs []*state.Record, outcomes []outcome, now time.Time) (expired []*attachment, notes []func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[state.Key]bool, len(recs))
	for i, rec := range recs {
		key := rec.Key()
		seen[key] = true
		a := m.atts[key]
		if a == nil {
			a = &attachment{drift: map[drift.Reason]string{}}
			m.atts[key] = a
			m.log.Debug("watching attachment", attachmentAttrs(rec)...)
		}
		a.rec = rec
		o := outcomes[i]
		switch {
		case o.err == nil:
			if note := m.applyFindings(a, o.findings); note != nil {
				notes = append(notes, note)
			}
		case errors.Is(o.err, drift.ErrNetnsGone):
			if a.status != StatusStale {
				a.staleSince = now
				m.log.Warn("attachment's network namespace is gone; its record is removed after the grace period unless DEL comes first",
					append(attachmentAttrs(rec), "grace", m.cfg.StaleGrace)...)
			}
			a.status, a.drift, a.lastErr = StatusStale, map[drift.Reason]string{}, ""
			if now.Sub(a.staleSince) >= m.cfg.StaleGrace {
				expired = append(expired, a)
			}
		default:
			if a.status != StatusUnknown || a.lastErr != o.err.Error() {
				m.log.Warn("cannot check attachment", append(attachmentAttrs(rec), "err", o.err)...)
			}
			if !o.timedOut {
				m.met.checkErrors.Inc()
			}
			a.status, a.lastErr = StatusUnknown, o.err.Error()
		}
	}
	for key, a := range m.atts {
		if !seen[key] {
			m.log.Debug("attachment record gone (DEL or GC)", attachmentAttrs(a.rec)...)
			delete(m.atts, key)
		}
	}
	return expired, notes
}

// applyFindings records an attachment's drift reasons, logs and counts
// the changes, and returns the notifier call for them (nil when none).
func (m *Monitor) applyFindings(a *attachment, findings []drift.Finding) func() {
	now := map[drift.Reason]string{}
	for _, f := range findings {
		now[f.Reason] = f.Detail
	}
	var appeared []drift.Finding
	var cleared []drift.Reason
	for _, r := range drift.Reasons {
		detail, drifting := now[r]
		_, was := a.drift[r]
		switch {
		case drifting && !was:
			m.met.driftEvents.WithLabelValues(a.rec.Network, string(r)).Inc()
			m.log.Warn("drift detected", append(attachmentAttrs(a.rec), "reason", string(r), "detail", detail)...)
			appeared = append(appeared, drift.Finding{Reason: r, Detail: detail})
		case !drifting && was:
			m.log.Info("drift recovered", append(attachmentAttrs(a.rec), "reason", string(r))...)
			cleared = append(cleared, r)
		}
	}
	if a.status == StatusUnknown || a.status == StatusStale {
		m.log.Info("attachment can be checked again", attachmentAttrs(a.rec)...)
	}
	a.drift, a.lastErr = now, ""
	a.status = StatusOK
	if len(now) > 0 {
		a.status = StatusDrifted
	}
	if len(appeared) == 0 && len(cleared) == 0 || len(m.cfg.Notifiers) == 0 {
		return nil
	}
	rec := a.rec
	return func() {
		for _, n := range m.cfg.Notifiers {
			n.Drift(rec, appeared, cleared)
		}
	}
}

// removeStale deletes a stale record once its grace has passed, unless the
// record changed since the sweep read it.
func (m *Monitor) removeStale(a *attachment) {
	rec := a.rec
	cur, err := m.store.Load(rec.Key())
	if errors.Is(err, state.ErrNotFound) {
		return // DEL or GC got there first
	}
	if err != nil {
		m.log.Warn("cannot re-read stale record before removing it", append(attachmentAttrs(rec), "err", err)...)
		return
	}
	if cur.Netns != rec.Netns || !cur.Created.Equal(rec.Created) {
		return // a new attachment took the key
	}
	if err := m.store.Delete(rec.Key()); err != nil {
		m.log.Error("cannot remove stale record", append(attachmentAttrs(rec), "err", err)...)
		return
	}
	m.met.staleRemoved.Inc()
	m.log.Info("removed the record of an attachment whose network namespace is gone",
		append(attachmentAttrs(rec), "staleFor", time.Since(a.staleSince).Round(time.Millisecond))...)
	m.mu.Lock()
	delete(m.atts, rec.Key())
	m.mu.Unlock()
}

// RunDoctor runs the node doctor once and logs findings that appeared or
// went away since the last run.
func (m *Monitor) RunDoctor(context.Context) {
	if m.cfg.Doctor == nil {
		return
	}
	rep, err := doctor.Run(*m.cfg.Doctor)
	if err == nil {
		defer func() {
			for _, n := range m.cfg.Notifiers {
				n.Doctor(rep)
			}
		}()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doctorAt = time.Now()
	if err != nil {
		if m.doctorErr == nil || m.doctorErr.Error() != err.Error() {
			m.log.Error("node doctor cannot run", "err", err)
		}
		m.doctorErr = err
		return
	}
	m.doctorRep, m.doctorErr = rep, nil
	now := map[string]doctor.Finding{}
	for _, f := range rep.Findings {
		now[f.Check+"\x00"+f.Subject+"\x00"+string(f.Severity)] = f
	}
	for _, k := range sortedKeys(now) {
		if _, ok := m.doctorKnown[k]; !ok && now[k].Severity != doctor.SeverityInfo {
			f := now[k]
			m.log.Warn("node doctor finding", "check", f.Check, "severity", string(f.Severity), "subject", f.Subject, "message", f.Message, "remedy", f.Remedy)
		}
	}
	for _, k := range sortedKeys(m.doctorKnown) {
		if _, ok := now[k]; !ok && m.doctorKnown[k].Severity != doctor.SeverityInfo {
			f := m.doctorKnown[k]
			m.log.Info("node doctor finding cleared", "check", f.Check, "severity", string(f.Severity), "subject", f.Subject)
		}
	}
	m.doctorKnown = now
}

// Health says whether the sweep loop is alive: a sweep completed within
// three intervals plus one check timeout (or the monitor is younger than
// that).
func (m *Monitor) Health() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	limit := 3*m.cfg.Interval + m.cfg.CheckTimeout
	last := m.lastSweep
	if last.IsZero() {
		last = m.started
	}
	if age := time.Since(last); age > limit {
		return fmt.Errorf("no sweep completed for %s (limit %s)", age.Round(time.Millisecond), limit)
	}
	return nil
}

// Ready says whether the monitor has completed a sweep and can read the
// state directory.
func (m *Monitor) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastSweep.IsZero() {
		return errors.New("no sweep completed yet")
	}
	if m.listErr != nil {
		return fmt.Errorf("cannot list attachment records: %w", m.listErr)
	}
	return nil
}

func attachmentAttrs(r *state.Record) []any {
	attrs := []any{"network", r.Network, "containerID", r.ContainerID, "ifName", r.IfName, "pci", r.PCI, "netns", r.Netns}
	if r.PodName != "" {
		attrs = append(attrs, "namespace", r.PodNamespace, "pod", r.PodName)
	}
	return attrs
}

// countReadErrors counts the per-file errors state.Store.List joins after
// the good records; 0 for nil and for a failure to list the directory at
// all (a single wrapped error).
func countReadErrors(err error) int {
	if err == nil {
		return 0
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		return len(joined.Unwrap())
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
