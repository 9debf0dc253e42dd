package monitor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// Stuck lists, for /healthz, each VF whose check, port-state read or link
// watch opening has run longer than the check timeout (a read that does
// not return; that VF alone waits for it) or whose last check failed, in
// PCI order.
func (m *Monitor) Stuck(now time.Time) []string {
	limit := m.cfg.CheckTimeout
	type line struct{ pci, text string }
	var lines []line
	m.mu.Lock()
	for key, a := range m.atts {
		var parts []string
		if since, ok := m.inflight[key]; ok && now.Sub(since) >= limit {
			parts = append(parts, "a check has been running for "+status.RoundDur(now.Sub(since)))
		}
		if a.ports != nil {
			if d, ok := a.ports.busy.Running(now); ok && d >= limit {
				parts = append(parts, "a port-state read has been running for "+status.RoundDur(d))
			}
		}
		if !a.subscribing.IsZero() && now.Sub(a.subscribing) >= limit {
			parts = append(parts, "opening its link watch (and reading its port state) has been running for "+status.RoundDur(now.Sub(a.subscribing)))
		}
		switch {
		case len(parts) > 0:
			lines = append(lines, line{a.rec.PCI, "stuck: " + describeVF(a.rec) + ": " + strings.Join(parts, "; ") +
				" (a read that does not return: this VF alone waits for it)"})
		case a.status == status.Unknown:
			lines = append(lines, line{a.rec.PCI, "unchecked: " + describeVF(a.rec) + ": " + a.lastErr})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(lines, func(a, b line) int { return strings.Compare(a.pci+a.text, b.pci+b.text) })
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
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
