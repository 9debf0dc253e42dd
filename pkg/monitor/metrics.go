package monitor

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
)

const metricsNS = "sriov_stable"

// metrics exports the monitor's view. Gauges are built from the view at
// scrape time, so an attachment or a doctor finding that went away leaves
// no stale series behind; counters accumulate.
type metrics struct {
	m *Monitor

	sweeps         prometheus.Counter
	timeouts       prometheus.Counter
	checkErrors    prometheus.Counter
	staleRemoved   prometheus.Counter
	driftEvents    *prometheus.CounterVec
	repairs        *prometheus.CounterVec
	repairsRefused *prometheus.CounterVec
	events         *prometheus.CounterVec
	subscriptions  *prometheus.Desc

	attachments, attachmentDrift, lastSweepTime, lastSweepDuration, recordErrors *prometheus.Desc
	doctorUp, doctorLastRun, doctorFindings, doctorFinding, buildInfo            *prometheus.Desc
}

func newMetrics(m *Monitor) *metrics {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNS, "", name), help, labels, nil)
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNS, Name: name, Help: help})
	}
	return (&metrics{
		m:            m,
		sweeps:       counter("sweeps_total", "Sweeps completed over every attachment record."),
		timeouts:     counter("check_timeouts_total", "Attachment checks abandoned after the per-attachment timeout."),
		checkErrors:  counter("check_errors_total", "Attachment checks that failed for another reason than a vanished netns or a timeout."),
		staleRemoved: counter("stale_records_removed_total", "Records removed because their network namespace stayed gone for the grace period."),
		driftEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNS, Name: "drift_events_total", Help: "Drifts newly detected, by network and reason (each logged once).",
		}, []string{"network", "reason"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNS, Name: "repairs_total", Help: "Drifts the monitor put right, by kind (altname, name, host); each also logged.",
		}, []string{"kind"}),
		repairsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNS, Name: "repairs_refused_total",
			Help: "Repairs not made, by kind and reason (not-owner, name-taken, failed, host-netns).",
		}, []string{"kind", "reason"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNS, Name: "events_total",
			Help: "Changes that queued an attachment check, by source (link, sysfs, netns, record).",
		}, []string{"source"}),
		subscriptions: desc("event_subscriptions", "Open link-notification sockets, one per attachment whose pod netns exists (0 with --events=false)."),
		attachments:   desc("attachments", "Recorded attachments by network and status (ok, drifted, stale, unknown).", "network", "status"),
		attachmentDrift: desc("attachment_drift",
			"Attachments currently drifting, by network and reason (renamed, altname-missing, mac, guid, mtu, link-layer, port-down, missing).",
			"network", "reason"),
		lastSweepTime:     desc("last_sweep_timestamp_seconds", "Unix time the last sweep completed (0 before the first)."),
		lastSweepDuration: desc("last_sweep_duration_seconds", "How long the last sweep took."),
		recordErrors:      desc("record_read_errors", "Attachment record files the last sweep could not read."),
		doctorUp:          desc("doctor_up", "1 when the last node doctor run completed, 0 when it could not run (sysfs unreadable)."),
		doctorLastRun:     desc("doctor_last_run_timestamp_seconds", "Unix time of the last node doctor run."),
		doctorFindings:    desc("doctor_findings", "Node doctor findings of the last run, by severity.", "severity"),
		doctorFinding: desc("doctor_finding", "One node doctor finding of the last run (value 1), by check, severity and subject.",
			"check", "severity", "subject"),
		buildInfo: desc("agent_build_info", "The agent's version and commit (value 1).", "version", "commit"),
	}).zeros()
}

// zeros makes every series of the labelled counters whose labels are
// known in advance exist from the start, so alerts and dashboards see 0.
func (x *metrics) zeros() *metrics {
	for _, k := range RepairKinds {
		x.repairs.WithLabelValues(k)
		for _, r := range refusals {
			x.repairsRefused.WithLabelValues(k, r)
		}
	}
	for _, s := range sources {
		x.events.WithLabelValues(s)
	}
	return x
}

func (x *metrics) counters() []prometheus.Collector {
	return []prometheus.Collector{x.sweeps, x.timeouts, x.checkErrors, x.staleRemoved, x.driftEvents, x.repairs, x.repairsRefused, x.events}
}

// Describe implements prometheus.Collector.
func (x *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range x.counters() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{x.attachments, x.attachmentDrift, x.lastSweepTime, x.lastSweepDuration, x.recordErrors, x.subscriptions,
		x.doctorUp, x.doctorLastRun, x.doctorFindings, x.doctorFinding, x.buildInfo} {
		ch <- d
	}
	attachmentSeries.describe(ch)
}

// Collect implements prometheus.Collector.
func (x *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range x.counters() {
		c.Collect(ch)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labelValues(labels)...)
	}
	gauge(x.buildInfo, 1, buildinfo.Version, buildinfo.Commit)

	m := x.m
	m.mu.Lock()
	defer m.mu.Unlock()
	byStatus := map[string]map[Status]int{}
	byReason := map[string]map[drift.Reason]int{}
	for _, a := range m.atts {
		net := a.rec.Network
		if byStatus[net] == nil {
			byStatus[net], byReason[net] = map[Status]int{}, map[drift.Reason]int{}
		}
		byStatus[net][a.status]++
		for r := range a.drift {
			byReason[net][r]++
		}
	}
	attachmentSeries.collect(ch, m.atts)
	for net, counts := range byStatus {
		for _, s := range Statuses {
			gauge(x.attachments, float64(counts[s]), net, string(s))
		}
		for _, r := range drift.Reasons {
			gauge(x.attachmentDrift, float64(byReason[net][r]), net, string(r))
		}
	}
	var last float64
	if !m.lastSweep.IsZero() {
		last = float64(m.lastSweep.UnixNano()) / 1e9
	}
	gauge(x.lastSweepTime, last)
	gauge(x.lastSweepDuration, m.lastTook.Seconds())
	gauge(x.recordErrors, float64(m.readErrs))
	gauge(x.subscriptions, float64(m.subs))

	if m.cfg.Doctor == nil || m.doctorAt.IsZero() {
		return
	}
	gauge(x.doctorLastRun, float64(m.doctorAt.UnixNano())/1e9)
	if m.doctorErr != nil {
		gauge(x.doctorUp, 0)
		return
	}
	gauge(x.doctorUp, 1)
	if m.nodeRep == nil { // the first run's report is being published
		return
	}
	for _, s := range doctor.Severities {
		gauge(x.doctorFindings, float64(m.nodeRep.Count(s)), string(s))
	}
	seen := map[[3]string]bool{}
	for _, f := range m.nodeRep.Findings {
		k := [3]string{f.Check, string(f.Severity), f.Subject}
		if seen[k] {
			continue // e.g. node and port GUID of one VF: one series
		}
		seen[k] = true
		gauge(x.doctorFinding, 1, k[:]...)
	}
}

// labelValue makes s a valid label value. Prometheus refuses a value that
// is not UTF-8, and one such series fails the whole scrape (a 500), or
// panics where a counter is incremented. Records are JSON, whose decoder
// already replaces invalid bytes, but a doctor's subject comes from sysfs
// names, raw bytes. Each byte that is not part of valid UTF-8 becomes
// \xNN, so distinct values stay distinct series.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size <= 1 {
			fmt.Fprintf(&b, `\x%02x`, s[0])
		} else {
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// labelValues is labelValue of each, in place.
func labelValues(vs []string) []string {
	for i, v := range vs {
		vs[i] = labelValue(v)
	}
	return vs
}

// Collector returns the monitor's Prometheus collector.
func (m *Monitor) Collector() prometheus.Collector { return m.met }
