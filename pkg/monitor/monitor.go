// Package monitor is the sriov-stable-agent's attachment watcher, one of
// its sources (see package status). It runs CHECK's drift checks against
// every attachment ADD recorded: at once when a VF's link changes in its
// pod netns (a link-notification socket per attachment), when its RDMA
// port state or link layer changes (sysfs, polled) or when a record
// appears, and over every record each interval as the backstop. It
// repairs, where asked and where safe, a lost altname or name in a pod;
// marks attachments whose netns vanished as stale and removes their
// records after a grace period. Its notifiers hear each change; Snapshot
// is what the exporters read. It needs no Kubernetes API server.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Defaults for Config fields left zero.
const (
	DefaultInterval      = 30 * time.Second
	DefaultCheckTimeout  = 5 * time.Second
	DefaultStaleGrace    = 10 * time.Minute
	DefaultConcurrency   = 4
	DefaultPollInterval  = time.Second
	DefaultRepairBackoff = 10 * time.Second
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
	Logger      *slog.Logger
	// Notifiers hear of each change after the log and metrics have it.
	Notifiers []Notifier

	// SweepOnly turns the event-driven checks off: no link subscriptions
	// in pod netns, no sysfs polling, no state directory watch. Drift is
	// then found by the sweep alone, up to an interval late.
	SweepOnly bool
	// PollInterval is how often the recorded VFs' RDMA port state and link
	// layer (sysfs sends no notification) are read, and their netns paths
	// looked at. Zero means DefaultPollInterval.
	PollInterval time.Duration
	// Repairs says which drifts the monitor puts right; none by default.
	Repairs Repairs
	// RepairBackoff is the least time between two repairs of one kind on
	// one attachment; it doubles with every repair (up to
	// maxRepairBackoff), so the monitor does not fight whatever keeps
	// undoing them. Zero means DefaultRepairBackoff.
	RepairBackoff time.Duration
	// HostNetns is the host's network namespace ("" is the agent's own):
	// no pod repair is made in it, nor in the agent's own.
	HostNetns string
	// Carried, when set, hears the names an attachment's VF carried in its
	// pod (its record's ifname and altname when the attachment goes, a name
	// a check saw it under): the host janitor's proof that a free VF
	// carrying one came back from a pod (janitor.Janitor.Carried).
	Carried func(pci string, names ...string)
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
	// names the repair (RepairAltName, RepairName), detail says what
	// changed.
	Repaired(rec *state.Record, kind, detail string)
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("poll interval %s is negative", c.PollInterval)
	}
	if c.RepairBackoff == 0 {
		c.RepairBackoff = DefaultRepairBackoff
	}
	if c.RepairBackoff < 0 {
		return fmt.Errorf("repair backoff %s is negative", c.RepairBackoff)
	}
	return nil
}

// Timing is the sweep interval and check timeout a monitor made from cfg
// would use, zero fields given their defaults: the host janitor cleans on
// the same schedule.
func Timing(cfg Config) (interval, checkTimeout time.Duration, err error) {
	if err := cfg.applyDefaults(); err != nil {
		return 0, 0, err
	}
	return cfg.Interval, cfg.CheckTimeout, nil
}

// attachment is the monitor's memory of one record between checks.
// Fields are guarded by Monitor.mu, except rec, set before the attachment
// is shared and never changed (a record replaced under its key is another
// attachment), and ports (the poller's, see events.go).
type attachment struct {
	rec        *state.Record
	status     status.AttachmentStatus
	drift      map[drift.Reason]string // current drift reasons → detail
	staleSince time.Time
	lastErr    string
	checkedAt  time.Time // when the check whose result was applied last began
	// The VF's link index when last found (vfnet.LocateLastSeen).
	ifindex int
	// With events: the link subscription (nil when none is open), what the
	// netns path named when last looked at, and the polled sysfs files.
	sub      *subscription
	pathID   vfnet.NetnsID
	lastLink string // linkSummary of the VF's last notification
	ports    *portPoll
	// subscribing is when the goroutine opening the link watch (and
	// reading the port state's baseline) began; zero when none runs.
	subscribing time.Time
	// Per repair kind: when it may run again, and the refusal last logged.
	repairs map[string]*repairState
	// errBackoff is the wait before checking again after a failed check:
	// the poll interval after the first, doubling to the sweep interval.
	errBackoff time.Duration
}

// Monitor watches the attachments of one state directory.
type Monitor struct {
	cfg   Config
	store *state.Store
	sys   sysfs.Reader
	log   *slog.Logger
	// ownNetns is the network namespace the agent runs in: with the one
	// --host-netns names, the host's, where no pod repair is ever made.
	ownNetns vfnet.NetnsID

	// queue is the one schedule of attachment checks (client-go's delaying
	// workqueue): a sweep adds every key, an event adds its key after
	// settle, a repair backoff or a failed check after its wait. A key is
	// handed to one worker at a time and is Done only when its check's
	// goroutine returns, so a check stuck in the kernel holds its key, and
	// a key added meanwhile is checked once more after it.
	queue workqueue.TypedDelayingInterface[state.Key]
	// sweepMu serializes sweeps; sweeping is the one under way, whose
	// checks finish marks done.
	sweepMu  sync.Mutex
	sweeping *sweepWait
	// drainMu: while no workers run (Sweep called outside Run), a sweep's
	// own goroutines take its keys, one Len-then-Get at a time.
	drainMu sync.Mutex

	// recMu serializes reconciles: the sweep's and the state dir watch's.
	recMu sync.Mutex
	dirs  *state.RecordWatch // nil without events, or when inotify is unavailable
	// subscribers are the goroutines opening link watches (subscribeAsync).
	subscribers sync.WaitGroup

	mu          sync.Mutex
	atts        map[state.Key]*attachment
	files       map[string]state.Key    // record file name → key, of the attachments in atts
	inflight    map[state.Key]time.Time // when each running check began; it may be past its timeout
	workers     bool                    // Run's workers take the queue's keys
	eventsOn    bool                    // Run's event machinery is up: reconcile opens subscriptions
	subs        int                     // open link subscriptions
	started     time.Time
	lastSweep   time.Time // end of the last completed sweep
	lastTook    time.Duration
	listErr     error  // the state dir could not be listed at all
	readErrs    int    // record files that could not be read
	readErrText string // what the last sweep said about them, "" for none

	// Counters, for Snapshot; each safe without mu.
	sweeps, timeouts, checkErrors, staleRemoved atomic.Uint64
	driftEvents                                 status.Counts[status.NetworkReason]
	triggers                                    status.Counts[string]
	repairCounts                                status.RepairCounts
}

// New validates cfg and returns a monitor; nothing runs until Run or Sweep.
func New(cfg Config) (*Monitor, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, fmt.Errorf("monitor configuration: %w", err)
	}
	m := &Monitor{
		cfg:      cfg,
		store:    state.NewStore(cfg.StateDir),
		sys:      sysfs.Reader{Root: cfg.SysfsRoot},
		log:      cfg.Logger,
		atts:     map[state.Key]*attachment{},
		files:    map[string]state.Key{},
		inflight: map[state.Key]time.Time{},
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[state.Key]{
			Name: "sriov-stable-monitor",
		}),
		started: time.Now(),
	}
	own, err := ownNetns()
	if err != nil {
		return nil, fmt.Errorf("the agent's own network namespace: %w", err)
	}
	m.ownNetns = own
	return m, nil
}

// ownNetns is the network namespace the calling process runs in: that of
// a thread no goroutine has moved elsewhere (vfnet enters pod netns only
// on locked threads, and brings them back).
func ownNetns() (vfnet.NetnsID, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return vfnet.NetnsIDOf("/proc/thread-self/ns/net")
}

// Run sweeps every interval and checks attachments as events come (unless
// SweepOnly), until ctx ends.
// When it returns, every link subscription is closed. It returns even
// while a sysfs or netlink read blocks in the kernel: the goroutine stuck
// in it is left behind, and ends when the read does.
func (m *Monitor) Run(ctx context.Context) {
	m.log.Info("drift monitor started", "stateDir", m.cfg.StateDir, "sysfsRoot", m.cfg.SysfsRoot,
		"interval", m.cfg.Interval, "checkTimeout", m.cfg.CheckTimeout, "staleGrace", m.cfg.StaleGrace,
		"events", !m.cfg.SweepOnly, "pollInterval", m.cfg.PollInterval, "repair", m.cfg.Repairs.String())
	var wg sync.WaitGroup
	m.startWorkers(ctx, &wg)
	if !m.cfg.SweepOnly {
		m.startEvents(ctx, &wg)
	}
	// Non-sliding: a sweep longer than the interval delays the next one
	// rather than overlapping it.
	wait.NonSlidingUntilWithContext(ctx, m.Sweep, m.cfg.Interval)
	wg.Wait()
	m.stopEvents()
}

// startWorkers starts Concurrency workers taking keys from the queue until
// ctx ends, which shuts the queue down.
func (m *Monitor) startWorkers(ctx context.Context, wg *sync.WaitGroup) {
	m.mu.Lock()
	m.workers = true
	m.mu.Unlock()
	for range m.cfg.Concurrency {
		wg.Go(func() {
			for {
				key, quit := m.queue.Get()
				if quit {
					return
				}
				m.process(ctx, key)
			}
		})
	}
	go func() {
		<-ctx.Done()
		m.queue.ShutDown()
	}()
}

// queueCheck asks for a check of key after settle, counting what asked.
func (m *Monitor) queueCheck(key state.Key, source string) {
	m.triggers.Inc(source)
	m.queue.AddAfter(key, settle)
}

// outcome is one attachment's check result.
type outcome struct {
	findings []drift.Finding // as found
	repairs  []repairResult  // repairs tried after that
	after    []drift.Finding // after the repairs (nil when none ran)
	retryAt  time.Time       // a repair called for waits (backoff) until then
	err      error
	timedOut bool
	// started is when the check began: a result older than the one last
	// applied (a stuck check's, once a sweep reported it stuck) is
	// dropped. Zero: always applied.
	started time.Time
}

// Sweep checks every recorded attachment once, each bounded by the check
// timeout, and updates the monitor's view, logs and metrics.
func (m *Monitor) Sweep(ctx context.Context) {
	start := time.Now()
	recs, err := m.store.List()
	listFailed := err != nil && countReadErrors(err) == 0
	m.reconcile(recs)
	if m.dirs != nil {
		m.dirs.Ensure() // the state directory may have appeared
	}
	m.mu.Lock()
	for _, a := range m.atts {
		if a.ports != nil {
			a.ports.stale.Store(true)
		}
	}
	m.mu.Unlock()
	m.checkAll(ctx, recs)
	took := time.Since(start)
	m.mu.Lock()
	prevListErr, prevReadErrText := m.listErr, m.readErrText
	if listFailed {
		m.listErr = err
	} else {
		m.listErr = nil
		m.readErrs = countReadErrors(err)
		m.readErrText = ""
		if err != nil {
			m.readErrText = err.Error()
		}
	}
	m.lastSweep, m.lastTook = time.Now(), took
	m.mu.Unlock()
	switch {
	case listFailed && (prevListErr == nil || prevListErr.Error() != err.Error()):
		m.log.Error("cannot list attachment records", "stateDir", m.cfg.StateDir, "err", err)
	case !listFailed && err != nil && err.Error() != prevReadErrText:
		// Once per change, not every sweep: the metric counts them meanwhile.
		m.log.Warn("some attachment records are unreadable", "files", countReadErrors(err), "err", err)
	case !listFailed && err != nil:
		m.log.Debug("some attachment records are unreadable", "err", err)
	case !listFailed && prevListErr != nil:
		m.log.Info("attachment records readable again", "stateDir", m.cfg.StateDir)
	}
	m.sweeps.Add(1)
	m.log.Debug("sweep done", "attachments", len(recs), "took", took)
}

// sweepWait is what a sweep waits for: a check of each of its keys that
// began after the sweep did, or one that timed out.
type sweepWait struct {
	since time.Time
	left  map[state.Key]bool
	done  chan struct{}
}

// checked notes that key's check for the sweep is over; call with mu held.
func (w *sweepWait) checked(key state.Key) {
	if w == nil || !w.left[key] {
		return
	}
	delete(w.left, key)
	if len(w.left) == 0 {
		close(w.done)
	}
}

// checkAll adds every record's key to the queue and waits until each has
// been checked since the sweep began, or timed out, or ctx ends. A key
// whose check has run past the check timeout is reported stuck at once:
// the sweep does not wait for it (its key stays with the stuck check, and
// is checked again once that returns). Run's workers take the keys; a
// sweep outside Run (no workers) takes them itself.
func (m *Monitor) checkAll(ctx context.Context, recs []*state.Record) {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	if m.queue.ShuttingDown() { // Run has ended: no one would take the keys
		return
	}
	now := time.Now()
	w := &sweepWait{since: now, left: map[state.Key]bool{}, done: make(chan struct{})}
	var stuck []*state.Record
	m.mu.Lock()
	workers := m.workers
	for _, rec := range recs {
		if since, busy := m.inflight[rec.Key()]; busy && now.Sub(since) >= m.cfg.CheckTimeout {
			stuck = append(stuck, rec)
			continue
		}
		w.left[rec.Key()] = true
	}
	if len(w.left) == 0 {
		close(w.done)
	}
	m.sweeping = w
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.sweeping = nil
		m.mu.Unlock()
	}()
	for _, rec := range stuck {
		since := m.inflightSince(rec.Key())
		m.finish(rec, outcome{started: now, timedOut: true,
			err: fmt.Errorf("an earlier check, started %s, is still running (netns %s)", since.Format(time.RFC3339), rec.Netns)}, false)
	}
	for _, rec := range recs {
		m.queue.Add(rec.Key())
	}
	if !workers {
		m.drain(ctx)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

func (m *Monitor) inflightSince(key state.Key) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inflight[key]
}

// drain checks what the queue holds with Concurrency goroutines, for a
// sweep while no workers run (only sweeps add keys then).
func (m *Monitor) drain(ctx context.Context) {
	var wg sync.WaitGroup
	for range m.cfg.Concurrency {
		wg.Go(func() {
			for {
				m.drainMu.Lock()
				if m.queue.Len() == 0 || m.queue.ShuttingDown() {
					m.drainMu.Unlock()
					return
				}
				key, quit := m.queue.Get()
				m.drainMu.Unlock()
				if quit {
					return
				}
				m.process(ctx, key)
			}
		})
	}
	wg.Wait()
}

// process runs the drift checks of the attachment key names, taken from
// the queue, in a goroutine of its own, which applies the result and then
// marks the key done; it waits for that at most the check timeout. A
// check can block in the kernel, where it cannot be cancelled: a netlink
// request waiting for the RTNL lock a slow driver holds, a sysfs read of a
// wedged device. One that outlives its timeout is reported (the attachment
// is unknown meanwhile) and keeps its goroutine and its key: the queue
// hands the key to no one else until it returns, so results are applied
// in the order their checks began, and a key added meanwhile is checked
// again after it.
func (m *Monitor) process(ctx context.Context, key state.Key) {
	m.mu.Lock()
	var rec *state.Record
	if a := m.atts[key]; a != nil {
		rec = a.rec
	}
	if rec == nil { // the record went meanwhile
		m.sweeping.checked(key)
		m.mu.Unlock()
		m.queue.Done(key)
		return
	}
	started := time.Now()
	m.inflight[key] = started
	m.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer m.queue.Done(key)
		o := m.inspect(rec)
		o.started = started
		m.finish(rec, o, true)
	}()
	timer := time.NewTimer(m.cfg.CheckTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		m.timeouts.Add(1)
		m.mu.Lock()
		stuck := m.inflight[key] == started
		m.mu.Unlock()
		if stuck {
			m.finish(rec, outcome{err: fmt.Errorf("check timed out after %s (netns %s)", m.cfg.CheckTimeout, rec.Netns), timedOut: true, started: started}, false)
		}
	case <-ctx.Done():
	}
}

// finish applies one check's outcome and, for the check itself (last),
// ends it in the same critical section; it tells the sweep under way of a
// check that began after it, or of one that timed out. Then it calls the
// notifiers and removes an expired stale record.
func (m *Monitor) finish(rec *state.Record, o outcome, last bool) {
	key := rec.Key()
	m.mu.Lock()
	expired, notes := m.applyLocked(rec, o, time.Now())
	if last {
		delete(m.inflight, key)
	}
	if w := m.sweeping; w != nil && (o.timedOut || !o.started.Before(w.since)) {
		w.checked(key)
	}
	m.mu.Unlock()
	for _, note := range notes {
		note()
	}
	if expired != nil {
		m.removeStale(expired)
	}
}

// inspect observes one attachment, compares it with its record and, where
// asked and allowed, repairs what drifted.
func (m *Monitor) inspect(rec *state.Record) outcome {
	exp := drift.FromRecord(rec)
	now := time.Now()
	m.mu.Lock()
	var allowed []string
	var waiting map[string]time.Time
	var ports *portPoll
	if a := m.current(rec); a != nil {
		exp.IfIndex = a.ifindex
		allowed, waiting = m.podRepairs(a, now)
		ports = a.ports
	}
	m.mu.Unlock()
	// The poller's values are taken before this check reads: a change
	// after this moment differs at its next read, even one this check sees
	// first and that is undone before that read (a port a sweep found DOWN
	// that comes back within a poll interval); otherwise the poller, which
	// never saw it DOWN, would see nothing change and the recovery wait
	// for the next sweep.
	ports.baseline()
	var obs *drift.Observation
	err := vfnet.InNetns(exp.Netns, func(h *vfnet.Handle) error {
		o, _, l, err := drift.ObserveWith(h, exp, m.sys)
		defer l.Close()
		if err == nil && o.Found {
			m.pollFrom(rec, l)
		}
		obs = o
		return err
	})
	if err != nil {
		return outcome{err: err}
	}
	if obs.Found {
		m.mu.Lock()
		if a := m.current(rec); a != nil {
			a.ifindex = obs.IfIndex
		}
		m.mu.Unlock()
		if obs.Name != rec.IfName {
			m.carried(rec.PCI, obs.Name) // it may come home so named
		}
	}
	o := outcome{findings: drift.Compare(exp, obs)}
	kinds, retry := repairsFor(o.findings, allowed, waiting)
	o.retryAt = retry
	if len(kinds) > 0 && obs.Found {
		exp.IfIndex = obs.IfIndex
		o.repairs, o.after = m.repairPod(rec, exp, obs, kinds)
	}
	return o
}

// current returns the attachment of rec's key if it is still rec's (the
// same attachment: not replaced under the same key). Call with mu held.
func (m *Monitor) current(rec *state.Record) *attachment {
	a := m.atts[rec.Key()]
	if a == nil || !sameAttachment(a.rec, rec) {
		return nil
	}
	return a
}

// sameAttachment reports whether two records describe one attachment: a
// record replaced under the same key (a new sandbox reusing the container
// ID and ifname) is another.
func sameAttachment(a, b *state.Record) bool {
	return a.Key() == b.Key() && a.Netns == b.Netns && a.PCI == b.PCI && a.PodUID == b.PodUID && a.Created.Equal(b.Created)
}

// reconcile makes the monitor's set of attachments the records': new
// records are remembered (and, with events on, subscribed to and queued
// for a check), records gone are forgotten and their subscriptions closed.
// Subscribing, which can block in the kernel, comes after recMu is
// released.
func (m *Monitor) reconcile(recs []*state.Record) {
	m.recMu.Lock()
	var added []*attachment
	var closing []*subscription
	m.mu.Lock()
	seen := make(map[state.Key]bool, len(recs))
	for _, rec := range recs {
		seen[rec.Key()] = true
		a, old := m.trackLocked(rec)
		if a != nil {
			added = append(added, a)
		}
		closing = append(closing, old)
	}
	var unlisted []state.Key
	for key := range m.atts {
		if !seen[key] {
			unlisted = append(unlisted, key)
		}
	}
	m.mu.Unlock()
	// recs may be older than what an event about one file tracked since
	// (a sweep lists, then checks, then reconciles): drop only what is gone
	// from the directory now. recMu keeps events out meanwhile.
	gone := m.goneNow(unlisted)
	m.mu.Lock()
	for _, key := range gone {
		if m.atts[key] != nil {
			closing = append(closing, m.dropLocked(key))
		}
	}
	events := m.eventsOn
	m.mu.Unlock()
	m.recMu.Unlock()
	m.reconciled(added, closing, events)
}

// goneNow keeps of keys those whose record file holds no record of that
// key now (removed, or unreadable: the sweep counts those). Call with
// recMu held, not mu: it reads the files.
func (m *Monitor) goneNow(keys []state.Key) []state.Key {
	var out []state.Key
	for _, k := range keys {
		if rec, err := m.store.LoadFile(state.FileName(k)); err == nil && rec.Key() == k {
			continue
		}
		out = append(out, k)
	}
	return out
}

// reconcileFile brings the monitor's view of one record file up to date,
// as an event about that file asks: it reads that record alone, so an
// event costs the same however many records there are. A file that cannot
// be read is left to the sweep, which counts it; a record under another
// name than its key's (not the plugin's doing) makes the whole directory
// read again, and its removal is left to the sweep.
func (m *Monitor) reconcileFile(name string) {
	rec, err := m.store.LoadFile(name)
	switch {
	case err == nil && state.FileName(rec.Key()) != name:
		recs, _ := m.store.List()
		m.reconcile(recs)
		return
	case err != nil && !errors.Is(err, state.ErrNotFound):
		m.log.Debug("attachment record unreadable; the sweep reports it", "file", name, "err", err)
		return
	}
	m.recMu.Lock()
	m.mu.Lock()
	var added []*attachment
	var closing *subscription
	if rec != nil {
		var a *attachment
		if a, closing = m.trackLocked(rec); a != nil {
			added = append(added, a)
		}
	} else if key, ok := m.files[name]; ok {
		closing = m.dropLocked(key)
	}
	events := m.eventsOn
	m.mu.Unlock()
	m.recMu.Unlock()
	m.reconciled(added, []*subscription{closing}, events)
}

// trackLocked remembers rec unless its attachment is known already, and
// returns the new attachment (nil when known) and the subscription of the
// attachment it replaced under its key, to close. Call with recMu and mu
// held.
func (m *Monitor) trackLocked(rec *state.Record) (added *attachment, closing *subscription) {
	key := rec.Key()
	a := m.atts[key]
	if a != nil && sameAttachment(a.rec, rec) {
		return nil, nil
	}
	if a != nil {
		m.log.Debug("attachment record replaced", attachmentAttrs(rec)...)
		closing = a.sub
		m.forget(a)
	}
	a = &attachment{rec: rec, drift: map[drift.Reason]string{}}
	m.atts[key] = a
	m.files[state.FileName(key)] = key
	m.log.Debug("watching attachment", attachmentAttrs(rec)...)
	return a, closing
}

// dropLocked forgets the attachment of key, whose record went, and returns
// its subscription, to close. Call with recMu and mu held.
func (m *Monitor) dropLocked(key state.Key) *subscription {
	a := m.atts[key]
	if a == nil {
		return nil
	}
	m.log.Debug("attachment record gone (DEL or GC)", attachmentAttrs(a.rec)...)
	s := a.sub
	m.forget(a)
	delete(m.atts, key)
	delete(m.files, state.FileName(key))
	return s
}

// reconciled closes the subscriptions of attachments gone and, with events
// on, subscribes to the new ones and queues their first checks. Call
// without locks held.
func (m *Monitor) reconciled(added []*attachment, closing []*subscription, events bool) {
	for _, s := range closing {
		s.close()
	}
	if !events {
		return
	}
	for _, a := range added {
		m.subscribeBounded(a)
		m.queueCheck(a.rec.Key(), status.TriggerRecord)
	}
}

// forget notes the pod names of an attachment that goes (a VF that comes
// home still carrying them is cleaned up on the host) and closes its port
// poll. Call with mu held.
func (m *Monitor) forget(a *attachment) {
	m.carried(a.rec.PCI, a.rec.IfName, a.rec.AltName)
	a.sub = nil
	a.ports.close()
}

// carried passes names an attachment of VF pci carried in its pod to
// Config.Carried.
func (m *Monitor) carried(pci string, names ...string) {
	if m.cfg.Carried != nil {
		m.cfg.Carried(pci, names...)
	}
}

// retryLater queues a check of the attachment at t (not zero), when a
// repair it needs may run again or a failed read is tried again; with
// events only (else the sweep does). The queue keeps the earliest time
// asked for a key. Call with mu held.
func (m *Monitor) retryLater(a *attachment, t time.Time) {
	if t.IsZero() || !m.eventsOn {
		return
	}
	m.queue.AddAfter(a.rec.Key(), time.Until(t))
}

// apply is reconcile and applyOutcomes: one sweep's records and results.
func (m *Monitor) apply(recs []*state.Record, outcomes []outcome, now time.Time) (expired []*attachment, notes []func()) {
	m.reconcile(recs)
	return m.applyOutcomes(recs, outcomes, now)
}

// applyOutcomes folds check results into the monitor's view; see
// applyLocked.
func (m *Monitor) applyOutcomes(recs []*state.Record, outcomes []outcome, now time.Time) (expired []*attachment, notes []func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, rec := range recs {
		a, n := m.applyLocked(rec, outcomes[i], now)
		if a != nil {
			expired = append(expired, a)
		}
		notes = append(notes, n...)
	}
	return expired, notes
}

// applyLocked folds one check result into the monitor's view and logs
// every change once: a new drift reason, a repair, a recovery, a vanished
// netns, a check that starts or stops failing. A result for an attachment
// that went or was replaced meanwhile, or older than the one applied last,
// is dropped. It returns the attachment if it is stale past its grace, and
// the notifier calls to make once mu is released. Call with mu held.
func (m *Monitor) applyLocked(rec *state.Record, o outcome, now time.Time) (expired *attachment, notes []func()) {
	a := m.current(rec)
	if a == nil || o.started.Before(a.checkedAt) {
		return nil, nil
	}
	a.checkedAt = o.started
	switch {
	case o.err == nil:
		a.errBackoff = 0
		notes = append(notes, m.applyFindings(a, o.findings))
		for _, r := range o.repairs {
			notes = append(notes, m.applyRepair(a, r, now))
		}
		if o.after != nil {
			notes = append(notes, m.applyFindings(a, o.after))
		}
		m.retryLater(a, o.retryAt)
	case errors.Is(o.err, drift.ErrNetnsGone):
		if a.status != status.Stale {
			a.staleSince = now
			m.log.Warn("attachment's network namespace is gone; its record is removed after the grace period unless DEL comes first",
				append(attachmentAttrs(rec), "grace", m.cfg.StaleGrace)...)
		}
		a.status, a.drift, a.lastErr = status.Stale, map[drift.Reason]string{}, ""
		if now.Sub(a.staleSince) >= m.cfg.StaleGrace {
			expired = a
		}
	default:
		if a.status != status.Unknown || a.lastErr != o.err.Error() {
			m.log.Warn("cannot check attachment", append(attachmentAttrs(rec), "err", o.err)...)
		}
		if !o.timedOut {
			m.checkErrors.Add(1)
			// A read that failed once (a device probed again, a file
			// replaced as it was read) is tried again soon, not left to
			// the sweep; one that keeps failing, less and less often.
			a.errBackoff = min(max(2*a.errBackoff, m.cfg.PollInterval), m.cfg.Interval)
			m.retryLater(a, now.Add(a.errBackoff))
		}
		a.status, a.lastErr = status.Unknown, o.err.Error()
	}
	return expired, slices.DeleteFunc(notes, func(f func()) bool { return f == nil })
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
			m.driftEvents.Inc(status.NetworkReason{Network: a.rec.Network, Reason: r})
			m.log.Warn("drift detected", append(attachmentAttrs(a.rec), "reason", string(r), "detail", detail)...)
			appeared = append(appeared, drift.Finding{Reason: r, Detail: detail})
		case !drifting && was:
			m.log.Info("drift recovered", append(attachmentAttrs(a.rec), "reason", string(r))...)
			cleared = append(cleared, r)
		}
	}
	if a.status == status.Unknown || a.status == status.Stale {
		m.log.Info("attachment can be checked again", attachmentAttrs(a.rec)...)
	}
	a.drift, a.lastErr = now, ""
	a.status = status.OK
	if len(now) > 0 {
		a.status = status.Drifted
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
	m.staleRemoved.Add(1)
	m.mu.Lock()
	staleFor := time.Since(a.staleSince).Round(time.Millisecond)
	var sub *subscription
	if m.atts[rec.Key()] == a {
		sub = a.sub
		m.forget(a)
		delete(m.atts, rec.Key())
		delete(m.files, state.FileName(rec.Key()))
	}
	m.mu.Unlock()
	sub.close()
	m.log.Info("removed the record of an attachment whose network namespace is gone", append(attachmentAttrs(rec), "staleFor", staleFor)...)
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

// Snapshot is the monitor's view for the exporters: a copy, each
// attachment's drift reasons in drift.Reasons' order, the list in key
// order.
func (m *Monitor) Snapshot() status.Attachments {
	m.mu.Lock()
	out := status.Attachments{
		List:          make([]status.Attachment, 0, len(m.atts)),
		LastSweep:     m.lastSweep,
		LastSweepTook: m.lastTook,
		RecordErrors:  m.readErrs,
		Subscriptions: m.subs,
	}
	for _, a := range m.atts {
		att := status.Attachment{Record: a.rec, Status: a.status}
		for _, r := range drift.Reasons {
			if _, ok := a.drift[r]; ok {
				att.Drift = append(att.Drift, r)
			}
		}
		out.List = append(out.List, att)
	}
	m.mu.Unlock()
	slices.SortFunc(out.List, func(a, b status.Attachment) int {
		return strings.Compare(state.FileName(a.Record.Key()), state.FileName(b.Record.Key()))
	})
	out.Sweeps, out.Timeouts = m.sweeps.Load(), m.timeouts.Load()
	out.CheckErrors, out.StaleRemoved = m.checkErrors.Load(), m.staleRemoved.Load()
	out.DriftEvents, out.Triggers = m.driftEvents.Snapshot(), m.triggers.Snapshot()
	out.Repairs = m.repairCounts.Snapshot()
	return out
}
