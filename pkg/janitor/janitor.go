// Package janitor is the agent's host janitor: in its own loop it finds
// the free VFs of the host netns that carry a name or altnames proven
// left behind by one of their attachments (hostvf.FindLeftovers, Strict)
// and, for each one that has looked the same for a whole interval (so a
// VF that host-device is moving home and about to rename is left alone),
// gives it its host name back and removes the stale altnames, under the
// VF's lock and only while no live record claims it. It runs only with
// --repair=host.
package janitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostvf"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Notifier hears of each free VF repaired: rec holds only its PCI, PF and
// VFIndex (no pod); kind is status.RepairHost.
type Notifier interface {
	Repaired(rec *state.Record, kind, detail string)
}

// Config says where to look and how often.
type Config struct {
	StateDir  string // the plugin's stateDir: the records prove which names are a pod's
	SysfsRoot string
	// HostNetns is the host's network namespace; "" is the agent's own.
	HostNetns string
	// AltName is the plugin's altName template; "" is its default.
	AltName string
	// Where free VFs' host names come from: the hostconfig spec, the
	// directory of hostconfig's .link files.
	Spec    *hostconfig.Spec
	LinkDir string
	// Interval between two cleanups; a leftover is put right only when two
	// cleanups in a row saw it alike. Timeout bounds one cleanup's wait:
	// netlink requests on the host can wait long for the RTNL lock.
	Interval, Timeout time.Duration
	Logger            *slog.Logger
	Notifiers         []Notifier
}

// History bounds: names kept per VF (the newest), VFs kept in all.
const (
	historyNames = 8
	historyVFs   = 4096
)

// Janitor cleans free host VFs.
type Janitor struct {
	cfg    Config
	store  *state.Store
	log    *slog.Logger
	busy   status.Busy
	counts status.RepairCounts

	mu      sync.Mutex
	history map[string][]string // VF → names its attachments carried in their pods
	prev    map[string]string   // leftover VFs of the last cleanup → what they looked like
	notes   map[string]bool     // notes and refusals already logged
}

// New validates cfg and returns a janitor; nothing runs until Run or Clean.
func New(cfg Config) (*Janitor, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("state directory is empty")
	}
	if cfg.Interval <= 0 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("interval %s and timeout %s must be positive", cfg.Interval, cfg.Timeout)
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = config.DefaultSysfsRoot
	}
	if cfg.AltName == "" {
		cfg.AltName = config.DefaultAltName
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Janitor{cfg: cfg, store: state.NewStore(cfg.StateDir), log: cfg.Logger,
		history: map[string][]string{}, prev: map[string]string{}, notes: map[string]bool{}}, nil
}

// Run cleans every interval until ctx ends; a cleanup that outlives the
// timeout is left running (and not started again) while Run goes on.
func (j *Janitor) Run(ctx context.Context) {
	wait.NonSlidingUntilWithContext(ctx, func(context.Context) { j.CleanBounded() }, j.cfg.Interval)
}

// CleanBounded lists the records and cleans, waiting at most the timeout.
func (j *Janitor) CleanBounded() {
	recs, err := j.store.List()
	if err != nil && !readErrorsOnly(err) {
		j.note([]string{fmt.Sprintf("host cleanup waits: cannot list attachment records: %v", err)})
		return
	}
	started, finished := j.busy.RunBounded(nil, j.cfg.Timeout, func() { j.Clean(recs) })
	switch {
	case !started:
		j.log.Debug("host cleanup still running from an earlier interval")
	case !finished:
		j.log.Warn("host cleanup takes longer than its timeout; it goes on without being waited for", "timeout", j.cfg.Timeout)
	}
}

// readErrorsOnly reports whether a List error is only per-file errors
// (state.Store.List joins them after the good records), not a failure to
// list the directory at all.
func readErrorsOnly(err error) bool {
	var joined interface{ Unwrap() []error }
	return errors.As(err, &joined)
}

// Carried notes names an attachment of VF pci carried in its pod (its
// record's ifname and altname, a name a check saw it under): the proof a
// cleanup needs before it renames a free VF that carries one of them.
// The history is the agent's memory only; it starts empty at each start,
// where the records of pods whose netns is gone still prove theirs.
func (j *Janitor) Carried(pci string, names ...string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.history) >= historyVFs && j.history[pci] == nil {
		j.history = map[string][]string{}
	}
	h := j.history[pci]
	for _, n := range names {
		if n == "" || slices.Contains(h, n) {
			continue
		}
		h = append(h, n)
		if len(h) > historyNames {
			h = h[1:]
		}
	}
	j.history[pci] = h
}

// Clean finds the leftovers recs and the history prove and puts right
// those that looked the same at the cleanup before.
func (j *Janitor) Clean(recs []*state.Record) {
	err := j.withHost(func(h *vfnet.Handle) error {
		links, err := h.Links()
		if err != nil {
			return err
		}
		j.mu.Lock()
		history := make(map[string][]string, len(j.history))
		for pci, names := range j.history {
			history[pci] = slices.Clone(names)
		}
		j.mu.Unlock()
		found, notes, err := hostvf.FindLeftovers(hostvf.Input{
			SysfsRoot: j.cfg.SysfsRoot, AltName: j.cfg.AltName, Records: recs, Links: links,
			Spec: j.cfg.Spec, LinkDir: j.cfg.LinkDir, History: history, Strict: true,
		})
		if err != nil {
			return err
		}
		j.note(notes)
		seen := map[string]string{}
		var act []hostvf.Leftover
		j.mu.Lock()
		for _, lo := range found {
			sig := fmt.Sprintf("%d %s %s", lo.LinkIndex, lo.Name, strings.Join(lo.AltNames, ","))
			seen[lo.PCI] = sig
			if j.prev[lo.PCI] == sig {
				act = append(act, lo)
			}
		}
		j.prev = seen
		j.mu.Unlock()
		for _, lo := range act {
			for _, r := range j.repair(h, lo) {
				j.apply(lo, r)
			}
		}
		return nil
	})
	if err != nil {
		j.note([]string{fmt.Sprintf("host cleanup cannot run: %v", err)})
	}
}

// withHost runs fn with a handle in the host's network namespace.
func (j *Janitor) withHost(fn func(h *vfnet.Handle) error) error {
	if j.cfg.HostNetns != "" {
		return vfnet.InNetns(j.cfg.HostNetns, fn)
	}
	h, err := vfnet.OpenHere()
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

// result is one repair made (refused "") or refused.
type result struct{ detail, refused string }

// repair puts one leftover right, under the VF's lock and only if no
// record whose netns exists claims the VF and its netdev is still the one
// judged (same index, same name).
func (j *Janitor) repair(h *vfnet.Handle, lo hostvf.Leftover) []result {
	refuse := func(reason, format string, args ...any) []result {
		return []result{{refused: reason, detail: fmt.Sprintf(format, args...)}}
	}
	lock, err := j.store.LockVF(lo.PCI)
	if err != nil {
		return refuse(status.RefusedFailed, "%v", err)
	}
	defer lock.Unlock()
	claims, err := lock.Claims(lo.PCI, state.Key{})
	if err != nil {
		return refuse(status.RefusedFailed, "cannot tell who owns VF %s: %v", lo.PCI, err)
	}
	for _, c := range claims {
		if vfnet.NetnsAlive(c.Netns) {
			return refuse(status.RefusedNotOwner, "VF %s is claimed by attachment %s (netns %s)", lo.PCI, c.Key(), c.Netns)
		}
	}
	l, err := h.LinkByName(lo.Name)
	if err != nil {
		return refuse(status.RefusedFailed, "%v", err)
	}
	if l == nil || l.Attrs().Index != lo.LinkIndex || l.Attrs().Name != lo.Name {
		return refuse(status.RefusedNotOwner, "VF %s's netdev %s changed since it was judged", lo.PCI, lo.Name)
	}
	var out []result
	for _, alt := range lo.StaleAltNames {
		if err := h.DelAltName(l, alt); err != nil {
			out = append(out, result{refused: status.RefusedFailed, detail: err.Error()})
			continue
		}
		out = append(out, result{detail: fmt.Sprintf("removed altname %s from %s", alt, lo.Name)})
	}
	switch {
	case lo.Rename == "":
	case lo.NameTakenBy != "" || h.Taken(lo.Rename):
		out = append(out, result{refused: status.RefusedNameTaken,
			detail: fmt.Sprintf("%s, the name the %s gives VF %s, is taken on the host", lo.Rename, lo.RenameFrom, lo.PCI)})
	default:
		if err := h.Rename(l, lo.Rename); err != nil {
			out = append(out, result{refused: status.RefusedFailed, detail: err.Error()})
			break
		}
		out = append(out, result{detail: fmt.Sprintf("renamed %s to %s, from the %s", lo.Name, lo.Rename, lo.RenameFrom)})
	}
	return out
}

// apply logs, counts and notifies one result. A refusal is logged once
// per VF and detail.
func (j *Janitor) apply(lo hostvf.Leftover, r result) {
	attrs := []any{"pci", lo.PCI, "pf", lo.PF, "vf", lo.Index, "detail", r.detail}
	if r.refused != "" {
		j.counts.Refused(status.RepairHost, r.refused)
		if j.fresh(lo.PCI + " " + r.detail) {
			j.log.Warn("free VF not repaired on the host", append(attrs, "why", r.refused)...)
		}
		return
	}
	j.counts.Made(status.RepairHost)
	j.log.Info("free VF repaired on the host", attrs...)
	rec := &state.Record{PCI: lo.PCI, PF: lo.PF, VFIndex: lo.Index}
	for _, n := range j.cfg.Notifiers {
		n.Repaired(rec, status.RepairHost, r.detail)
	}
}

// note logs each note once.
func (j *Janitor) note(notes []string) {
	for _, n := range notes {
		if j.fresh(n) {
			j.log.Warn("host cleanup", "note", n)
		}
	}
}

// fresh reports whether key was not logged yet, and marks it logged.
func (j *Janitor) fresh(key string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.notes) > 1024 {
		j.notes = map[string]bool{}
	}
	if j.notes[key] {
		return false
	}
	j.notes[key] = true
	return true
}

// Snapshot counts the repairs made and refused.
func (j *Janitor) Snapshot() status.Repairs { return j.counts.Snapshot() }

// Stuck names a cleanup that has run longer than its timeout, for /healthz.
func (j *Janitor) Stuck(now time.Time) []string {
	if d, ok := j.busy.Running(now); ok && d >= j.cfg.Timeout {
		return []string{"stuck: the host cleanup has been running for " + status.RoundDur(d)}
	}
	return nil
}
