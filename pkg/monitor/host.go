package monitor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// cleanHostBounded runs cleanHost on its own goroutine and waits at most
// the check timeout for it: netlink requests on the host can wait long for
// the RTNL lock. One that is still running is not started again.
func (m *Monitor) cleanHostBounded(recs []*state.Record) {
	if !m.hostBusy.start() {
		m.log.Debug("host cleanup still running from an earlier sweep")
		return
	}
	done := make(chan struct{})
	go func() {
		// Deferred last, so it is done when the caller sees done: the
		// next run must not find this one still busy.
		defer close(done)
		defer m.hostBusy.end()
		m.cleanHost(recs)
	}()
	select {
	case <-done:
	case <-time.After(m.cfg.CheckTimeout):
		m.log.Warn("host cleanup takes longer than the check timeout; the sweep goes on without it", "timeout", m.cfg.CheckTimeout)
	}
}

// withHost runs fn with a handle in the host's network namespace.
func (m *Monitor) withHost(fn func(h *vfnet.Handle) error) error {
	if m.cfg.HostNetns != "" {
		return vfnet.InNetns(m.cfg.HostNetns, fn)
	}
	h, err := vfnet.OpenHere()
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

// cleanHost finds the free VFs of the host netns that carry a name or
// altnames proven left behind by one of their attachments
// (doctor.FindLeftovers, Strict: the records, and the names the monitor
// saw the VF's attachments carry) and, for each one that has
// looked the same for a whole sweep interval (so a VF that host-device is
// moving home and about to rename is left alone), gives it its host name
// back and removes the stale altnames.
func (m *Monitor) cleanHost(recs []*state.Record) {
	err := m.withHost(func(h *vfnet.Handle) error {
		links, err := h.Links()
		if err != nil {
			return err
		}
		m.mu.Lock()
		history := make(map[string][]string, len(m.history))
		for pci, names := range m.history {
			history[pci] = slices.Clone(names)
		}
		m.mu.Unlock()
		found, notes, err := doctor.FindLeftovers(doctor.LeftoverInput{
			SysfsRoot: m.cfg.SysfsRoot, AltName: m.cfg.AltName, Records: recs, Links: links,
			Spec: m.cfg.Spec, LinkDir: m.cfg.LinkDir, History: history, Strict: true,
		})
		if err != nil {
			return err
		}
		m.noteHost(notes)
		seen := map[string]string{}
		var act []doctor.Leftover
		m.mu.Lock()
		for _, lo := range found {
			sig := fmt.Sprintf("%d %s %s", lo.LinkIndex, lo.Name, strings.Join(lo.AltNames, ","))
			seen[lo.PCI] = sig
			if m.hostPrev[lo.PCI] == sig {
				act = append(act, lo)
			}
		}
		m.hostPrev = seen
		m.mu.Unlock()
		for _, lo := range act {
			for _, r := range m.repairHostVF(h, lo) {
				m.applyHostRepair(lo, r)
			}
		}
		return nil
	})
	if err != nil {
		m.noteHost([]string{fmt.Sprintf("host cleanup cannot run: %v", err)})
	}
}

// noteHost logs each note once.
func (m *Monitor) noteHost(notes []string) {
	m.mu.Lock()
	if len(m.hostNotes) > 1024 {
		m.hostNotes = map[string]bool{}
	}
	var fresh []string
	for _, n := range notes {
		if !m.hostNotes[n] {
			m.hostNotes[n] = true
			fresh = append(fresh, n)
		}
	}
	m.mu.Unlock()
	for _, n := range fresh {
		m.log.Warn("host cleanup", "note", n)
	}
}

// repairHostVF puts one leftover right, under the VF's lock and only if no
// record whose netns exists claims the VF and its netdev is still the one
// judged (same index, same name).
func (m *Monitor) repairHostVF(h *vfnet.Handle, lo doctor.Leftover) []repairResult {
	refuse := func(reason, format string, args ...any) []repairResult {
		return []repairResult{{kind: RepairHost, refused: reason, detail: fmt.Sprintf(format, args...)}}
	}
	lock, err := m.store.LockVF(lo.PCI)
	if err != nil {
		return refuse(refusedFailed, "%v", err)
	}
	defer lock.Unlock()
	claims, err := lock.Claims(lo.PCI, state.Key{})
	if err != nil {
		return refuse(refusedFailed, "cannot tell who owns VF %s: %v", lo.PCI, err)
	}
	for _, c := range claims {
		if vfnet.NetnsAlive(c.Netns) {
			return refuse(refusedNotOwner, "VF %s is claimed by attachment %s (netns %s)", lo.PCI, c.Key(), c.Netns)
		}
	}
	l, err := h.LinkByName(lo.Name)
	if err != nil {
		return refuse(refusedFailed, "%v", err)
	}
	if l == nil || l.Attrs().Index != lo.LinkIndex || l.Attrs().Name != lo.Name {
		return refuse(refusedNotOwner, "VF %s's netdev %s changed since it was judged", lo.PCI, lo.Name)
	}
	var out []repairResult
	for _, alt := range lo.StaleAltNames {
		if err := h.DelAltName(l, alt); err != nil {
			out = append(out, repairResult{kind: RepairHost, refused: refusedFailed, detail: err.Error()})
			continue
		}
		out = append(out, repairResult{kind: RepairHost, detail: fmt.Sprintf("removed altname %s from %s", alt, lo.Name)})
	}
	switch {
	case lo.Rename == "":
	case lo.NameTakenBy != "" || h.Taken(lo.Rename):
		out = append(out, repairResult{kind: RepairHost, refused: refusedNameTaken,
			detail: fmt.Sprintf("%s, the name the %s gives VF %s, is taken on the host", lo.Rename, lo.RenameFrom, lo.PCI)})
	default:
		if err := h.Rename(l, lo.Rename); err != nil {
			out = append(out, repairResult{kind: RepairHost, refused: refusedFailed, detail: err.Error()})
			break
		}
		out = append(out, repairResult{kind: RepairHost, detail: fmt.Sprintf("renamed %s to %s, from the %s", lo.Name, lo.Rename, lo.RenameFrom)})
	}
	return out
}

// applyHostRepair logs, counts and notifies one host repair result. A
// refusal is logged once per VF and detail.
func (m *Monitor) applyHostRepair(lo doctor.Leftover, r repairResult) {
	attrs := []any{"pci", lo.PCI, "pf", lo.PF, "vf", lo.Index, "detail", r.detail}
	if r.refused != "" {
		m.met.repairsRefused.WithLabelValues(r.kind, r.refused).Inc()
		m.noteHostRefusal(lo.PCI+" "+r.detail, append(attrs, "why", r.refused))
		return
	}
	m.met.repairs.WithLabelValues(r.kind).Inc()
	m.log.Info("free VF repaired on the host", attrs...)
	if note := m.notifyRepaired(&state.Record{PCI: lo.PCI, PF: lo.PF, VFIndex: lo.Index}, r); note != nil {
		note()
	}
}

func (m *Monitor) noteHostRefusal(key string, attrs []any) {
	m.mu.Lock()
	if len(m.hostNotes) > 1024 {
		m.hostNotes = map[string]bool{}
	}
	fresh := !m.hostNotes[key]
	m.hostNotes[key] = true
	m.mu.Unlock()
	if fresh {
		m.log.Warn("free VF not repaired on the host", attrs...)
	}
}
