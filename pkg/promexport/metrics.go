// Package promexport is the agent's Prometheus exporter: /metrics built
// from the sources' snapshots (package status) at each scrape, /healthz
// and /readyz, and the HTTP server's limits.
package promexport

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

const metricsNS = "sriov_stable"

// Sources are the snapshots the exporter reads at each scrape; a nil one
// exports nothing (Node: the doctor is off; HostRepairs: no janitor).
type Sources struct {
	Attachments func() status.Attachments
	Node        func() status.Node
	HostRepairs func() status.Repairs
}

// collector exports the sources' snapshots. Every series is built from a
// snapshot at scrape time, so an attachment or a doctor finding that went
// away leaves no stale series behind; the counters are the sources' own
// counts. A scrape holds no source's lock while it writes.
type collector struct {
	src Sources

	sweeps, timeouts, checkErrors, staleRemoved            *prometheus.Desc
	driftEvents, repairs, repairsRefused, events           *prometheus.Desc
	subscriptions                                          *prometheus.Desc
	attachments, attachmentDrift, lastSweepTime            *prometheus.Desc
	lastSweepDuration, recordErrors                        *prometheus.Desc
	doctorUp, doctorLastRun, doctorFindings, doctorFinding *prometheus.Desc
	doctorFunctions                                        *prometheus.Desc
	buildInfo                                              *prometheus.Desc
}

// NewCollector returns the agent's Prometheus collector over src.
func NewCollector(src Sources) prometheus.Collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNS, "", name), help, labels, nil)
	}
	return &collector{
		src:          src,
		sweeps:       desc("sweeps_total", "Sweeps completed over every attachment record."),
		timeouts:     desc("check_timeouts_total", "Attachment checks abandoned after the per-attachment timeout."),
		checkErrors:  desc("check_errors_total", "Attachment checks that failed for another reason than a vanished netns or a timeout."),
		staleRemoved: desc("stale_records_removed_total", "Records removed because their network namespace stayed gone for the grace period."),
		driftEvents:  desc("drift_events_total", "Drifts newly detected, by network and reason (each logged once).", "network", "reason"),
		repairs: desc("repairs_total", "Drifts put right, by kind ("+strings.Join(status.RepairKinds, ", ")+"); each also logged.",
			"kind"),
		repairsRefused: desc("repairs_refused_total",
			"Repairs not made, by kind and reason ("+strings.Join(status.Refusals, ", ")+").", "kind", "reason"),
		events: desc("events_total",
			"Changes that queued an attachment check, by source ("+strings.Join(status.Triggers, ", ")+").", "source"),
		subscriptions: desc("event_subscriptions", "Open link-notification sockets, one per attachment whose pod netns exists (0 with --events=false)."),
		attachments: desc("attachments", "Recorded attachments by network and status ("+strings.Join(statusNames(), ", ")+").",
			"network", "status"),
		attachmentDrift: desc("attachment_drift",
			"Attachments currently drifting, by network and reason ("+strings.Join(reasonNames(), ", ")+").",
			"network", "reason"),
		lastSweepTime:     desc("last_sweep_timestamp_seconds", "Unix time the last sweep completed (0 before the first)."),
		lastSweepDuration: desc("last_sweep_duration_seconds", "How long the last sweep took."),
		recordErrors:      desc("record_read_errors", "Attachment record files the last sweep could not read."),
		doctorUp:          desc("doctor_up", "1 when the last node doctor run completed, 0 when it could not run (sysfs unreadable)."),
		doctorLastRun:     desc("doctor_last_run_timestamp_seconds", "Unix time of the last node doctor run."),
		doctorFindings:    desc("doctor_findings", "Node doctor findings of the last run, by severity.", "severity"),
		doctorFinding: desc("doctor_finding", "One node doctor finding of the last run (value 1), by check, severity and subject.",
			"check", "severity", "subject"),
		doctorFunctions: desc("doctor_functions", "Mellanox PCI functions the last node doctor run found, by kind (pf, vf).", "kind"),
		buildInfo:       desc("agent_build_info", "The agent's version and commit (value 1).", "version", "commit"),
	}
}

func statusNames() []string {
	var out []string
	for _, s := range status.Statuses {
		out = append(out, string(s))
	}
	return out
}

func reasonNames() []string {
	var out []string
	for _, r := range drift.Reasons {
		out = append(out, string(r))
	}
	return out
}

// Describe implements prometheus.Collector.
func (x *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{x.sweeps, x.timeouts, x.checkErrors, x.staleRemoved, x.driftEvents, x.repairs,
		x.repairsRefused, x.events, x.attachments, x.attachmentDrift, x.lastSweepTime, x.lastSweepDuration, x.recordErrors,
		x.subscriptions, x.doctorUp, x.doctorLastRun, x.doctorFindings, x.doctorFinding, x.doctorFunctions, x.buildInfo} {
		ch <- d
	}
	attachmentSeries.describe(ch)
}

// Collect implements prometheus.Collector.
func (x *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labelValues(labels)...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labelValues(labels)...)
	}
	gauge(x.buildInfo, 1, buildinfo.Version, buildinfo.Commit)
	var pod, host status.Repairs
	if x.src.Attachments != nil {
		a := x.src.Attachments()
		x.collectAttachments(ch, a, gauge, counter)
		pod = a.Repairs
	}
	if x.src.HostRepairs != nil {
		host = x.src.HostRepairs()
	}
	// Every kind and reason exists from the start, so alerts and
	// dashboards see 0.
	for _, k := range status.RepairKinds {
		counter(x.repairs, pod.Made[k]+host.Made[k], k)
		for _, r := range status.Refusals {
			kr := status.KindReason{Kind: k, Reason: r}
			counter(x.repairsRefused, pod.Refused[kr]+host.Refused[kr], k, r)
		}
	}
	if x.src.Node != nil {
		x.collectNode(x.src.Node(), gauge)
	}
}

type emit func(d *prometheus.Desc, v float64, labels ...string)

func (x *collector) collectAttachments(ch chan<- prometheus.Metric, a status.Attachments, gauge emit,
	counter func(d *prometheus.Desc, v uint64, labels ...string)) {
	counter(x.sweeps, a.Sweeps)
	counter(x.timeouts, a.Timeouts)
	counter(x.checkErrors, a.CheckErrors)
	counter(x.staleRemoved, a.StaleRemoved)
	// Keyed by the label value: two networks whose names differ only in
	// bytes that are not UTF-8 are one series, not a duplicate that fails
	// the scrape.
	events := map[[2]string]uint64{}
	for k, v := range a.DriftEvents {
		events[[2]string{labelValue(k.Network), string(k.Reason)}] += v
	}
	for k, v := range events {
		counter(x.driftEvents, v, k[:]...)
	}
	for _, s := range status.Triggers {
		counter(x.events, a.Triggers[s], s)
	}
	byStatus := map[string]map[status.AttachmentStatus]int{}
	byReason := map[string]map[drift.Reason]int{}
	for _, at := range a.List {
		net := labelValue(at.Record.Network)
		if byStatus[net] == nil {
			byStatus[net], byReason[net] = map[status.AttachmentStatus]int{}, map[drift.Reason]int{}
		}
		byStatus[net][at.Status]++
		for _, r := range at.Drift {
			byReason[net][r]++
		}
	}
	attachmentSeries.collect(ch, a.List)
	for net, counts := range byStatus {
		for _, s := range status.Statuses {
			gauge(x.attachments, float64(counts[s]), net, string(s))
		}
		for _, r := range drift.Reasons {
			gauge(x.attachmentDrift, float64(byReason[net][r]), net, string(r))
		}
	}
	var last float64
	if !a.LastSweep.IsZero() {
		last = float64(a.LastSweep.UnixNano()) / 1e9
	}
	gauge(x.lastSweepTime, last)
	gauge(x.lastSweepDuration, a.LastSweepTook.Seconds())
	gauge(x.recordErrors, float64(a.RecordErrors))
	gauge(x.subscriptions, float64(a.Subscriptions))
}

func (x *collector) collectNode(n status.Node, gauge emit) {
	if n.At.IsZero() {
		return
	}
	gauge(x.doctorLastRun, float64(n.At.UnixNano())/1e9)
	if n.Err != nil {
		gauge(x.doctorUp, 0)
		return
	}
	gauge(x.doctorUp, 1)
	if n.Report == nil { // the first run's report is being published
		return
	}
	gauge(x.doctorFunctions, float64(n.Report.PFs), "pf")
	gauge(x.doctorFunctions, float64(n.Report.VFs), "vf")
	for _, s := range doctor.Severities {
		gauge(x.doctorFindings, float64(n.Report.Count(s)), string(s))
	}
	seen := map[[3]string]bool{}
	for _, f := range n.Report.Findings {
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
