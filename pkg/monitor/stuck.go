package monitor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// busySince marks a job that can block in the kernel (a sysfs read of a
// wedged device, a netlink request waiting for the RTNL lock), where it
// cannot be cancelled: zero while none runs, else when the running one
// began. A job still running is not started again, and /healthz names it
// once it has run too long.
type busySince struct{ t atomic.Int64 }

// start marks the job running; false if it already is.
func (b *busySince) start() bool { return b.t.CompareAndSwap(0, time.Now().UnixNano()) }

func (b *busySince) end() { b.t.Store(0) }

// running reports how long the job has been running, and whether it is.
func (b *busySince) running(now time.Time) (time.Duration, bool) {
	t := b.t.Load()
	if t == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, t)), true
}

// maxStuckLines bounds what /healthz lists: the kubelet reads 10 KiB of a
// probe's body.
const maxStuckLines = 20

// Stuck lists what the monitor cannot make progress on, for /healthz to
// say beside its verdict: each VF whose check, port-state read or link
// watch opening has run longer than the check timeout (a read that does
// not return; that VF alone waits for it) or whose last check failed; a
// node doctor run longer than an interval; a host cleanup longer than the
// check timeout. None of it fails the probe: the sweeps go on for every
// other VF, and restarting the agent would not unblock the kernel.
func (m *Monitor) Stuck() []string {
	now := time.Now()
	limit := m.cfg.CheckTimeout
	type line struct{ pci, text string }
	var lines []line
	m.mu.Lock()
	for key, a := range m.atts {
		var parts []string
		if since, ok := m.inflight[key]; ok && now.Sub(since) >= limit {
			parts = append(parts, "a check has been running for "+roundDur(now.Sub(since)))
		}
		if a.ports != nil {
			if d, ok := a.ports.busy.running(now); ok && d >= limit {
				parts = append(parts, "a port-state read has been running for "+roundDur(d))
			}
		}
		if !a.subscribing.IsZero() && now.Sub(a.subscribing) >= limit {
			parts = append(parts, "opening its link watch (and reading its port state) has been running for "+roundDur(now.Sub(a.subscribing)))
		}
		switch {
		case len(parts) > 0:
			lines = append(lines, line{a.rec.PCI, "stuck: " + describeVF(a.rec) + ": " + strings.Join(parts, "; ") +
				"" +
				" (a read that does not return: this VF alone waits for it)"})
		case a.status == StatusUnknown:
			lines = append(lines, line{a.rec.PCI, "unchecked: " + describeVF(a.rec) + ": " + a.lastErr})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(lines, func(a, b line) int { return strings.Compare(a.pci+a.text, b.pci+b.text) })
	var out []string
	if d, ok := m.doctorBusy.running(now); ok && d >= m.cfg.Interval {
		out = append(out, "stuck: the node doctor has been running for "+roundDur(d))
	}
	if d, ok := m.hostBusy.running(now); ok && d >= limit {
		out = append(out, "stuck: the host cleanup has been running for "+roundDur(d))
	}
	for i, l := range lines {
		if len(out) == maxStuckLines-1 && i < len(lines)-1 {
			out = append(out, fmt.Sprintf("… and %d more", len(lines)-i))
			break
		}
		out = append(out, l.text)
	}
	return out
}

// describeVF names an attachment's VF for a person.
func describeVF(r *state.Record) string {
	who := "container " + r.ContainerID
	if r.PodName != "" {
		who = "pod " + r.PodNamespace + "/" + r.PodName
	}
	return fmt.Sprintf("VF %s (network %s, %s, ifname %s, netns %s)", r.PCI, r.Network, who, r.IfName, r.Netns)
}

func roundDur(d time.Duration) string { return d.Round(time.Millisecond).String() }

// runDoctorBounded runs the doctor on a goroutine of its own and waits for
// it until ctx ends: a run reads every VF's sysfs and can block in the
// kernel, and Run must still return when its context ends. A run still
// under way is not started again.
func (m *Monitor) runDoctorBounded(ctx context.Context) {
	if !m.doctorBusy.start() {
		m.log.Debug("node doctor still running from an earlier interval")
		return
	}
	done := make(chan struct{})
	go func() {
		// Deferred last, so it is done when the caller sees done: the
		// next run must not find this one still busy.
		defer close(done)
		defer m.doctorBusy.end()
		m.RunDoctor(ctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
