// Package status is what the agent's sources tell its exporters, in the
// shape node-problem-detector's users know: each source (the attachment
// watcher, package monitor; the node checks, package nodecheck, with the
// free-VF port watcher; the host janitor, package janitor) keeps its own
// state under its own lock and hands out a Snapshot, a copy; each
// exporter (Prometheus, package promexport; Kubernetes, package
// kubereport) reads snapshots and the calls sources make to their
// notifiers, and never a source's lock. The values here that are metric
// label values are stable.
package status

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// AttachmentStatus is what the last check concluded about an attachment.
type AttachmentStatus string

// Attachment statuses.
const (
	OK      AttachmentStatus = "ok"      // checked, no drift
	Drifted AttachmentStatus = "drifted" // checked, at least one drift reason
	Stale   AttachmentStatus = "stale"   // its network namespace is gone; the record goes after the grace period
	Unknown AttachmentStatus = "unknown" // the check failed or timed out; drift reasons are the last known ones
)

// Statuses lists every status, for metrics that must show zeros.
var Statuses = []AttachmentStatus{OK, Drifted, Stale, Unknown}

// Repair kinds: the values of --repair.
const (
	// RepairAltName re-adds a pod VF's stable altname; traffic is untouched.
	RepairAltName = "altname"
	// RepairName renames a pod VF back to its recorded ifname. The kernel
	// renames only a down link: the VF is down for the few milliseconds
	// the rename takes.
	RepairName = "name"
	// RepairHost gives a free VF in the host netns its host name back and
	// removes altnames a pod left on it (the janitor's).
	RepairHost = "host"
)

// RepairKinds lists every repair kind, in the order they are applied.
var RepairKinds = []string{RepairAltName, RepairName, RepairHost}

// Why a repair was not made.
const (
	RefusedNotOwner  = "not-owner"  // the record changed or went, another record claims the VF, or the VF or netns is not the one checked
	RefusedNameTaken = "name-taken" // another link holds the name or altname
	RefusedFailed    = "failed"     // a lock, read or netlink request failed
	RefusedHostNetns = "host-netns" // the record's netns is the host's: a pod repair there would change the host
)

// Refusals lists every refusal reason.
var Refusals = []string{RefusedNotOwner, RefusedNameTaken, RefusedFailed, RefusedHostNetns}

// What queued an attachment check.
const (
	TriggerLink   = "link"   // a link notification about the VF in its pod netns
	TriggerSysfs  = "sysfs"  // the VF's RDMA port state or link layer changed
	TriggerNetns  = "netns"  // the netns path went away or names another namespace
	TriggerRecord = "record" // a record appeared or was replaced
)

// Triggers lists every trigger.
var Triggers = []string{TriggerLink, TriggerSysfs, TriggerNetns, TriggerRecord}

// Attachment is one recorded attachment as last checked.
type Attachment struct {
	Record *state.Record
	Status AttachmentStatus
	Drift  []drift.Reason // in drift.Reasons' order
}

// Attachments is the attachment watcher's snapshot.
type Attachments struct {
	List          []Attachment
	LastSweep     time.Time // end of the last completed sweep; zero before
	LastSweepTook time.Duration
	RecordErrors  int // record files the last sweep could not read
	Subscriptions int // open link-notification sockets

	Sweeps, Timeouts, CheckErrors, StaleRemoved uint64
	DriftEvents                                 map[NetworkReason]uint64
	Triggers                                    map[string]uint64
	Repairs                                     Repairs
}

// NetworkReason keys drift events: the attachment's network and the
// drift reason.
type NetworkReason struct {
	Network string
	Reason  drift.Reason
}

// Repairs counts repairs made, by kind, and refused, by kind and reason.
type Repairs struct {
	Made    map[string]uint64
	Refused map[KindReason]uint64
}

// KindReason keys refused repairs.
type KindReason struct{ Kind, Reason string }

// RepairCounts counts repairs for a source; safe for concurrent use.
type RepairCounts struct {
	made    Counts[string]
	refused Counts[KindReason]
}

// Made counts one repair of kind made.
func (c *RepairCounts) Made(kind string) { c.made.Inc(kind) }

// Refused counts one repair of kind refused for reason.
func (c *RepairCounts) Refused(kind, reason string) { c.refused.Inc(KindReason{kind, reason}) }

// Snapshot copies the counts.
func (c *RepairCounts) Snapshot() Repairs {
	return Repairs{Made: c.made.Snapshot(), Refused: c.refused.Snapshot()}
}

// Node is the node checks' snapshot: the doctor's last run, with the port
// watcher's newer word on ports merged into its report.
type Node struct {
	At     time.Time      // when the last run ended; zero before the first
	Err    error          // the last run could not run (sysfs unreadable)
	Report *doctor.Report // nil until the first run's report is published
}

// Counts is a set of counters keyed by K; safe for concurrent use.
type Counts[K comparable] struct {
	mu sync.Mutex
	m  map[K]uint64
}

// Inc adds one to k's counter.
func (c *Counts[K]) Inc(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[K]uint64{}
	}
	c.m[k]++
}

// Snapshot copies the counters.
func (c *Counts[K]) Snapshot() map[K]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[K]uint64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Busy marks a job that can block in the kernel (a sysfs read of a wedged
// device, a netlink request waiting for the RTNL lock), where it cannot be
// cancelled: zero while none runs, else when the running one began. A job
// still running is not started again, and /healthz names it once it has
// run too long.
type Busy struct{ t atomic.Int64 }

// Start marks the job running; false if it already is.
func (b *Busy) Start() bool { return b.t.CompareAndSwap(0, time.Now().UnixNano()) }

// End marks the job done.
func (b *Busy) End() { b.t.Store(0) }

// Running reports how long the job has been running, and whether it is.
func (b *Busy) Running(now time.Time) (time.Duration, bool) {
	t := b.t.Load()
	if t == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, t)), true
}

// RunBounded runs fn on a goroutine of its own unless the job is running
// already (then false), and waits for it at most until done is closed or
// wait passes (wait 0: no bound but done). A run that outlives the wait
// keeps the job busy until it returns.
func (b *Busy) RunBounded(done <-chan struct{}, wait time.Duration, fn func()) (started, finished bool) {
	if !b.Start() {
		return false, false
	}
	over := make(chan struct{})
	go func() {
		// Deferred last, so the job is free when the caller sees over:
		// the next run must not find this one still busy.
		defer close(over)
		defer b.End()
		fn()
	}()
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-over:
		return true, true
	case <-done:
	case <-timeout:
	}
	return true, false
}

// RoundDur rounds a duration for the lines /healthz shows.
func RoundDur(d time.Duration) string { return d.Round(time.Millisecond).String() }
