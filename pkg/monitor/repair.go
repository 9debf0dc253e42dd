package monitor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Repair kinds, as --repair names them (package status's).
const (
	RepairAltName = status.RepairAltName
	RepairName    = status.RepairName
	RepairHost    = status.RepairHost
)

// maxRepairBackoff bounds the wait between repeated repairs of one kind on
// one attachment.
const maxRepairBackoff = 10 * time.Minute

// Repairs says which kinds of drift the monitor puts right.
type Repairs struct{ AltName, Name, Host bool }

// ParseRepairs reads --repair: a comma-separated list of altname, name and
// host; "" or "none" for none.
func ParseRepairs(s string) (Repairs, error) {
	var r Repairs
	if s == "" || s == "none" {
		return r, nil
	}
	for _, kind := range strings.Split(s, ",") {
		switch strings.TrimSpace(kind) {
		case RepairAltName:
			r.AltName = true
		case RepairName:
			r.Name = true
		case RepairHost:
			r.Host = true
		default:
			return Repairs{}, fmt.Errorf("repair kind %q is not one of %s (or none)", kind, strings.Join(status.RepairKinds, ", "))
		}
	}
	return r, nil
}

// String is the list ParseRepairs reads.
func (r Repairs) String() string {
	var kinds []string
	for _, k := range status.RepairKinds {
		if r.has(k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ",")
}

func (r Repairs) has(kind string) bool {
	switch kind {
	case RepairAltName:
		return r.AltName
	case RepairName:
		return r.Name
	case RepairHost:
		return r.Host
	}
	return false
}

// repairResult is one repair made or refused.
type repairResult struct {
	kind    string
	detail  string // what changed, or why not
	refused string // "" when made, else why not (refused*)
}

// repairState is an attachment's memory of one repair kind.
type repairState struct {
	next    time.Time     // no repair of this kind before then
	backoff time.Duration // the wait after the next repair
	refusal string        // the refusal last logged, so it is logged once
}

// podRepairs lists the pod repair kinds enabled: those that may be
// allowed, and when not yet (backoff), the earliest time one of them will
// be. Call with mu held.
func (m *Monitor) podRepairs(a *attachment, now time.Time) (allowed []string, waiting map[string]time.Time) {
	for _, k := range []string{RepairAltName, RepairName} {
		if !m.cfg.Repairs.has(k) {
			continue
		}
		if st := a.repairs[k]; st != nil && now.Before(st.next) {
			if waiting == nil {
				waiting = map[string]time.Time{}
			}
			waiting[k] = st.next
			continue
		}
		allowed = append(allowed, k)
	}
	return allowed, waiting
}

// repairsFor lists the kinds among allowed that the findings call for, in
// RepairKinds order, and the earliest time a kind they call for that is
// waiting may run.
func repairsFor(findings []drift.Finding, allowed []string, waiting map[string]time.Time) (kinds []string, retry time.Time) {
	for _, f := range findings {
		var k string
		switch f.Reason {
		case drift.AltNameMissing:
			k = RepairAltName
		case drift.Renamed:
			k = RepairName
		default:
			continue
		}
		if slices.Contains(allowed, k) {
			kinds = append(kinds, k)
		} else if t, ok := waiting[k]; ok && (retry.IsZero() || t.Before(retry)) {
			retry = t
		}
	}
	slices.SortFunc(kinds, func(a, b string) int {
		return slices.Index(status.RepairKinds, a) - slices.Index(status.RepairKinds, b)
	})
	return kinds, retry
}

// repairPod puts right what drifted of kinds, in order, after making sure
// the attachment's owner still holds the VF: under the VF's lock (the one
// ADD and DEL take, so neither runs meanwhile) the record on disk must be
// the one checked, byte for byte (so the same netns, VF and pod UID), no
// other record may claim the VF, and in the netns, still the one the check
// observed and not the host's, the VF must be found again by PCI address.
// It returns what was done and the drift after it. A GUID, MAC or MTU is
// never changed.
func (m *Monitor) repairPod(rec *state.Record, exp drift.Expect, seen *drift.Observation, kinds []string) (results []repairResult, after []drift.Finding) {
	refuse := func(reason, format string, args ...any) ([]repairResult, []drift.Finding) {
		detail := fmt.Sprintf(format, args...)
		out := make([]repairResult, len(kinds))
		for i, k := range kinds {
			out[i] = repairResult{kind: k, detail: detail, refused: reason}
		}
		return out, nil
	}
	lock, err := m.store.LockVF(rec.PCI)
	if err != nil {
		return refuse(status.RefusedFailed, "%v", err)
	}
	defer lock.Unlock()
	if why := m.stillOwner(lock, rec); why != "" {
		return refuse(status.RefusedNotOwner, "%s", why)
	}
	err = vfnet.InNetns(rec.Netns, func(h *vfnet.Handle) error {
		obs, link, l, err := drift.ObserveWith(h, exp, m.sys)
		l.Close()
		if err != nil {
			return err
		}
		host, err := m.isHostNetns(obs.Netns)
		switch {
		case err != nil:
			results, _ = refuse(status.RefusedFailed, "cannot tell whether netns %s is the host's: %v", rec.Netns, err)
			return nil
		case host:
			results, _ = refuse(status.RefusedHostNetns, "netns %s is the host's network namespace (%s): no pod repair is made there", rec.Netns, obs.Netns)
			return nil
		case obs.Netns != seen.Netns:
			results, _ = refuse(status.RefusedNotOwner, "netns %s is now %s, not %s where the drift was seen", rec.Netns, obs.Netns, seen.Netns)
			return nil
		case !obs.Found:
			results, _ = refuse(status.RefusedNotOwner, "VF %s is no longer in netns %s (it holds: %s)", rec.PCI, rec.Netns, strings.Join(obs.Present, ", "))
			return nil
		}
		for _, k := range kinds {
			r := m.repairLink(h, rec, link, k)
			if r == nil {
				continue // put right meanwhile
			}
			results = append(results, *r)
			if link, err = h.Refresh(link); err != nil {
				return err
			}
		}
		now, _, l, err := drift.ObserveWith(h, exp, m.sys)
		l.Close()
		if err != nil {
			return err
		}
		after = drift.Compare(exp, now)
		return nil
	})
	if err != nil && len(results) == 0 {
		return refuse(status.RefusedFailed, "%v", err)
	}
	return results, after
}

// isHostNetns reports whether id is the host's network namespace: the
// agent's own, or the one --host-netns names. Identities are compared, not
// paths: a record's netns path may be a bind mount of the host's.
func (m *Monitor) isHostNetns(id vfnet.NetnsID) (bool, error) {
	if id == m.ownNetns {
		return true, nil
	}
	if m.cfg.HostNetns == "" {
		return false, nil
	}
	host, err := vfnet.NetnsIDOf(m.cfg.HostNetns)
	if err != nil {
		return false, err
	}
	return id == host, nil
}

// stillOwner says why the record no longer owns its VF, or "": called with
// the VF's lock held.
func (m *Monitor) stillOwner(lock *state.VFLock, rec *state.Record) string {
	cur, err := m.store.Load(rec.Key())
	switch {
	case errors.Is(err, state.ErrNotFound):
		return "the attachment's record is gone (DEL or GC)"
	case err != nil:
		return fmt.Sprintf("cannot read the attachment's record again: %v", err)
	}
	a, errA := json.Marshal(cur)
	b, errB := json.Marshal(rec)
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		return "the attachment's record changed since it was checked"
	}
	claims, err := lock.Claims(rec.PCI, rec.Key())
	if err != nil {
		return fmt.Sprintf("cannot tell who owns VF %s: %v", rec.PCI, err)
	}
	if len(claims) > 0 {
		c := claims[0]
		return fmt.Sprintf("VF %s is claimed by another attachment: %s (netns %s, pod %s/%s uid %s)",
			rec.PCI, c.Key(), c.Netns, c.PodNamespace, c.PodName, c.PodUID)
	}
	return ""
}

// repairLink makes one repair of the VF's link l in the handle's netns;
// nil when there is nothing left to do.
func (m *Monitor) repairLink(h *vfnet.Handle, rec *state.Record, l netlink.Link, kind string) *repairResult {
	a := l.Attrs()
	fail := func(why, format string, args ...any) *repairResult {
		return &repairResult{kind: kind, refused: why, detail: fmt.Sprintf(format, args...)}
	}
	switch kind {
	case RepairAltName:
		if slices.Contains(a.AltNames, rec.AltName) {
			return nil
		}
		if holder, err := h.LinkByName(rec.AltName); err != nil || holder != nil {
			return fail(status.RefusedNameTaken, "altname %s is taken in netns %s by %s", rec.AltName, rec.Netns, linkName(holder, err))
		}
		if err := h.AddAltName(l, rec.AltName); err != nil {
			return fail(status.RefusedFailed, "%v", err)
		}
		return &repairResult{kind: kind, detail: fmt.Sprintf("added altname %s to %s again", rec.AltName, a.Name)}
	case RepairName:
		if a.Name == rec.IfName {
			return nil
		}
		if holder, err := h.LinkByName(rec.IfName); err != nil || holder != nil {
			return fail(status.RefusedNameTaken, "%s is taken in netns %s by %s", rec.IfName, rec.Netns, linkName(holder, err))
		}
		start := time.Now()
		if err := h.Rename(l, rec.IfName); err != nil {
			return fail(status.RefusedFailed, "%v", err)
		}
		detail := fmt.Sprintf("renamed %s back to %s", a.Name, rec.IfName)
		if a.Flags&net.FlagUp != 0 {
			detail += fmt.Sprintf(" (down for %s to rename it)", time.Since(start).Round(time.Microsecond))
		}
		return &repairResult{kind: kind, detail: detail}
	}
	return fail(status.RefusedFailed, "unknown repair kind %s", kind)
}

func linkName(l netlink.Link, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("a link that cannot be read (%v)", err)
	case l == nil:
		return "nothing"
	}
	return l.Attrs().Name
}

// applyRepair logs and counts one repair result of an attachment, moves
// its backoff on, and returns the notifier call for a repair made. Call
// with mu held.
func (m *Monitor) applyRepair(a *attachment, r repairResult, now time.Time) func() {
	if a.repairs == nil {
		a.repairs = map[string]*repairState{}
	}
	st := a.repairs[r.kind]
	if st == nil {
		st = &repairState{backoff: m.cfg.RepairBackoff}
		a.repairs[r.kind] = st
	}
	if r.refused != "" {
		m.repairCounts.Refused(r.kind, r.refused)
		if st.refusal != r.refused+r.detail {
			st.refusal = r.refused + r.detail
			m.log.Warn("drift not repaired", append(attachmentAttrs(a.rec), "kind", r.kind, "why", r.refused, "detail", r.detail)...)
		}
		return nil
	}
	st.refusal = ""
	if !st.next.IsZero() && now.Sub(st.next) > maxRepairBackoff {
		st.backoff = m.cfg.RepairBackoff // quiet for long: start over
	}
	st.next = now.Add(st.backoff)
	st.backoff = min(2*st.backoff, maxRepairBackoff)
	m.repairCounts.Made(r.kind)
	m.log.Info("drift repaired", append(attachmentAttrs(a.rec), "kind", r.kind, "detail", r.detail, "nextRepairAfter", st.next.Sub(now))...)
	return m.notifyRepaired(a.rec, r)
}

func (m *Monitor) notifyRepaired(rec *state.Record, r repairResult) func() {
	if len(m.cfg.Notifiers) == 0 {
		return nil
	}
	return func() {
		for _, n := range m.cfg.Notifiers {
			n.Repaired(rec, r.kind, r.detail)
		}
	}
}
