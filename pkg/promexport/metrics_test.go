package promexport

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// sources are snapshots a test sets, read by the collector as it reads a
// source's.
type sources struct {
	mu    sync.Mutex
	atts  status.Attachments
	node  status.Node
	host  status.Repairs
	calls int // Attachments calls
}

func (s *sources) set(fn func(*sources)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *sources) Sources() Sources {
	return Sources{
		Attachments: func() status.Attachments { s.mu.Lock(); defer s.mu.Unlock(); s.calls++; return s.atts },
		Node:        func() status.Node { s.mu.Lock(); defer s.mu.Unlock(); return s.node },
		HostRepairs: func() status.Repairs { s.mu.Lock(); defer s.mu.Unlock(); return s.host },
	}
}

type fixture struct {
	src *sources
	reg *prometheus.Registry
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{src: &sources{}, reg: prometheus.NewRegistry()}
	f.reg.MustRegister(NewCollector(f.src.Sources()))
	return f
}

func (f *fixture) absent(t *testing.T, name string, labels ...string) {
	t.Helper()
	if _, ok := promtest.Value(t, f.reg, name, labels...); ok {
		t.Errorf("series %s%v present, want none", name, labels)
	}
}

func record(network, id, pci string) *state.Record {
	return &state.Record{Network: network, ContainerID: id, IfName: "net1", Netns: "/run/netns/" + id, PCI: pci}
}

// Each attachment has its own series with its pod's identity; a record of
// an earlier release, without the pod, has them with empty pod labels.
// Drift reasons are 1 while drifting, 0 otherwise, and the series go with
// the attachment; the per-network gauges count statuses and reasons.
func TestPerAttachmentSeries(t *testing.T) {
	f := newFixture(t)
	withPod := record("ib-a", "c1", "0000:18:00.2")
	withPod.PodNamespace, withPod.PodName, withPod.NodeGUID = "e2e", "vf-0", "a288:c2ff:fe18:0000"
	old := record("ib-a", "c2", "0000:18:00.3")
	id := func(r *state.Record) []string {
		return []string{"network", r.Network, "namespace", r.PodNamespace, "pod", r.PodName, "container_id", r.ContainerID,
			"ifname", r.IfName, "pci", r.PCI}
	}
	info := func(r *state.Record, s status.AttachmentStatus) []string {
		return append(id(r), "node_guid", r.NodeGUID, "status", string(s))
	}
	reason := func(r *state.Record, reason drift.Reason) []string { return append(id(r), "reason", string(reason)) }

	f.src.set(func(s *sources) {
		s.atts.List = []status.Attachment{
			{Record: withPod, Status: status.Drifted, Drift: []drift.Reason{drift.Renamed, drift.PortDown}},
			{Record: old, Status: status.OK},
		}
	})
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_info", info(withPod, status.Drifted)...)
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_info", info(old, status.OK)...)
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.Renamed)...)
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.PortDown)...)
	promtest.Want(t, f.reg, 0, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.MAC)...)
	for _, r := range drift.Reasons {
		promtest.Want(t, f.reg, 0, "sriov_stable_attachment_drift_reasons", reason(old, r)...)
	}
	promtest.Want(t, f.reg, 1, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
	promtest.Want(t, f.reg, 1, "sriov_stable_attachments", "network", "ib-a", "status", "drifted")
	promtest.Want(t, f.reg, 0, "sriov_stable_attachments", "network", "ib-a", "status", "stale")
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_drift", "network", "ib-a", "reason", "renamed")
	promtest.Want(t, f.reg, 0, "sriov_stable_attachment_drift", "network", "ib-a", "reason", "mac")

	f.src.set(func(s *sources) { s.atts.List = []status.Attachment{{Record: withPod, Status: status.OK}} })
	promtest.Want(t, f.reg, 1, "sriov_stable_attachment_info", info(withPod, status.OK)...)
	promtest.Want(t, f.reg, 0, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.Renamed)...)
	f.absent(t, "sriov_stable_attachment_info", info(withPod, status.Drifted)...)
	f.absent(t, "sriov_stable_attachment_info", info(old, status.OK)...)
	f.absent(t, "sriov_stable_attachment_drift_reasons", reason(old, drift.Renamed)...)

	f.src.set(func(s *sources) { s.atts.List = nil })
	f.absent(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
}

// The counters are the sources' counts, every trigger, repair kind and
// refusal reason shown from the start; repairs are the attachment
// watcher's and the janitor's summed. One scrape reads the attachment
// snapshot once.
func TestCountersFromSnapshots(t *testing.T) {
	f := newFixture(t)
	promtest.Want(t, f.reg, 0, "sriov_stable_sweeps_total")
	for _, k := range status.RepairKinds {
		promtest.Want(t, f.reg, 0, "sriov_stable_repairs_total", "kind", k)
		for _, r := range status.Refusals {
			promtest.Want(t, f.reg, 0, "sriov_stable_repairs_refused_total", "kind", k, "reason", r)
		}
	}
	for _, tr := range status.Triggers {
		promtest.Want(t, f.reg, 0, "sriov_stable_events_total", "source", tr)
	}
	sweep := time.Unix(1_700_000_000, 500_000_000)
	f.src.set(func(s *sources) {
		s.atts = status.Attachments{
			Sweeps: 7, Timeouts: 2, CheckErrors: 3, StaleRemoved: 1, RecordErrors: 4, Subscriptions: 5,
			LastSweep: sweep, LastSweepTook: 250 * time.Millisecond,
			DriftEvents: map[status.NetworkReason]uint64{{Network: "ib-a", Reason: drift.Renamed}: 6},
			Triggers:    map[string]uint64{status.TriggerLink: 9},
			Repairs: status.Repairs{Made: map[string]uint64{status.RepairName: 2, status.RepairHost: 1},
				Refused: map[status.KindReason]uint64{{Kind: status.RepairName, Reason: status.RefusedNameTaken}: 1}},
		}
		s.host = status.Repairs{Made: map[string]uint64{status.RepairHost: 3},
			Refused: map[status.KindReason]uint64{{Kind: status.RepairHost, Reason: status.RefusedNotOwner}: 2}}
	})
	f.src.set(func(s *sources) { s.calls = 0 })
	if _, err := f.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	f.src.set(func(s *sources) {
		if s.calls != 1 {
			t.Errorf("one scrape read the attachment snapshot %d times, want 1", s.calls)
		}
	})
	for name, want := range map[string]float64{
		"sriov_stable_sweeps_total": 7, "sriov_stable_check_timeouts_total": 2, "sriov_stable_check_errors_total": 3,
		"sriov_stable_stale_records_removed_total": 1, "sriov_stable_record_read_errors": 4,
		"sriov_stable_event_subscriptions": 5, "sriov_stable_last_sweep_timestamp_seconds": 1_700_000_000.5,
		"sriov_stable_last_sweep_duration_seconds": 0.25,
	} {
		promtest.Want(t, f.reg, want, name)
	}
	promtest.Want(t, f.reg, 6, "sriov_stable_drift_events_total", "network", "ib-a", "reason", "renamed")
	promtest.Want(t, f.reg, 9, "sriov_stable_events_total", "source", status.TriggerLink)
	promtest.Want(t, f.reg, 0, "sriov_stable_events_total", "source", status.TriggerSysfs)
	promtest.Want(t, f.reg, 2, "sriov_stable_repairs_total", "kind", status.RepairName)
	promtest.Want(t, f.reg, 4, "sriov_stable_repairs_total", "kind", status.RepairHost)
	promtest.Want(t, f.reg, 1, "sriov_stable_repairs_refused_total", "kind", status.RepairName, "reason", status.RefusedNameTaken)
	promtest.Want(t, f.reg, 2, "sriov_stable_repairs_refused_total", "kind", status.RepairHost, "reason", status.RefusedNotOwner)
}

// The doctor's series: none before its first run; up, last run, findings
// by severity and one series per finding after it; a cleared finding's
// series goes; a run that could not run is up 0 and nothing else.
func TestNodeSeries(t *testing.T) {
	f := newFixture(t)
	f.absent(t, "sriov_stable_doctor_up")
	at := time.Unix(1_700_000_100, 0)
	zero := doctor.Finding{Check: finding.CheckGUIDInvalid, Severity: doctor.SeverityError, Subject: "0000:18:00.2"}
	f.src.set(func(s *sources) {
		// The same check, severity and subject twice (a VF's node and
		// port GUID): one series.
		s.node = status.Node{At: at, Report: &doctor.Report{PFs: 8, VFs: 64, Findings: []doctor.Finding{zero, zero}}}
	})
	promtest.Want(t, f.reg, 8, "sriov_stable_doctor_functions", "kind", "pf")
	promtest.Want(t, f.reg, 64, "sriov_stable_doctor_functions", "kind", "vf")
	promtest.Want(t, f.reg, 1, "sriov_stable_doctor_up")
	promtest.Want(t, f.reg, 1_700_000_100, "sriov_stable_doctor_last_run_timestamp_seconds")
	promtest.Want(t, f.reg, 1, "sriov_stable_doctor_finding", "check", finding.CheckGUIDInvalid, "severity", "error", "subject", "0000:18:00.2")
	promtest.Want(t, f.reg, 2, "sriov_stable_doctor_findings", "severity", "error")
	promtest.Want(t, f.reg, 0, "sriov_stable_doctor_findings", "severity", "warning")

	f.src.set(func(s *sources) { s.node = status.Node{At: at, Report: &doctor.Report{}} })
	f.absent(t, "sriov_stable_doctor_finding", "check", finding.CheckGUIDInvalid, "severity", "error", "subject", "0000:18:00.2")
	promtest.Want(t, f.reg, 0, "sriov_stable_doctor_findings", "severity", "error")

	f.src.set(func(s *sources) { s.node = status.Node{At: at, Err: errors.New("no sysfs")} })
	promtest.Want(t, f.reg, 0, "sriov_stable_doctor_up")
	f.absent(t, "sriov_stable_doctor_findings", "severity", "error")
	f.absent(t, "sriov_stable_doctor_functions", "kind", "vf")
}

// A label value that is not UTF-8 (a pod name or network with stray bytes,
// a doctor finding's subject read from sysfs) is escaped, byte by byte:
// the scrape answers 200 with every other series; two such values stay two
// series; two networks alike once escaped are one series, not a duplicate
// that fails the scrape.
func TestLabelsNotUTF8(t *testing.T) {
	f := newFixture(t)
	a := record("ib-\xc3", "c1", "0000:18:00.2")
	a.PodNamespace, a.PodName = "e2e", "pod-\xff\xfe"
	b := record("ib-\xc3", "c2", "0000:18:00.3")
	b.PodNamespace, b.PodName = "e2e", "pod-\xfe\xff"
	c := record(`ib-\xc3`, "c3", "0000:18:00.4") // the escaped form, literally
	f.src.set(func(s *sources) {
		s.atts.List = []status.Attachment{{Record: a, Status: status.OK}, {Record: b, Status: status.OK}, {Record: c, Status: status.OK}}
		s.atts.DriftEvents = map[status.NetworkReason]uint64{
			{Network: "ib-\xc3", Reason: drift.MTU}: 1, {Network: `ib-\xc3`, Reason: drift.MTU}: 2}
		s.node = status.Node{At: time.Now(), Report: &doctor.Report{Findings: []doctor.Finding{
			{Check: finding.CheckSysfs, Severity: doctor.SeverityError, Subject: "0000:18:00.\xff"}}}}
	})
	rec := httptest.NewRecorder()
	Handler(f.reg, Probes{Health: func() error { return nil }, Ready: func() error { return nil }}).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`pod="pod-\\xff\\xfe"`, `pod="pod-\\xfe\\xff"`, `network="ib-\\xc3"`, `subject="0000:18:00.\\xff"`,
		`sriov_stable_attachments{network="ib-\\xc3",status="ok"} 3`,
		`sriov_stable_drift_events_total{network="ib-\\xc3",reason="mtu"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"ib-a": "ib-a", "pod-ü": "pod-ü", "\xff": `\xff`, "a\xc3": `a\xc3`, "\xe2\x82": `\xe2\x82`, "x\xffü\xfe": `x\xffü\xfe`,
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// /healthz and /readyz answer 200 "ok" or 503 with the reason; /healthz
// lists every source's stuck lines after its verdict, in the sources'
// order, without failing for them, at most 20 lines.
func TestProbes(t *testing.T) {
	var health, ready error
	var lines [2][]string
	p := Probes{Health: func() error { return health }, Ready: func() error { return ready },
		Stuck: []func(time.Time) []string{
			func(time.Time) []string { return lines[0] },
			func(time.Time) []string { return lines[1] },
		}}
	h := Handler(prometheus.NewRegistry(), p)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	health, ready = errors.New("no sweep completed for 2m"), errors.New("no sweep completed yet")
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || body != "no sweep completed for 2m\n" {
		t.Errorf("/healthz = %d %q, want 503 with the reason", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "no sweep completed yet\n" {
		t.Errorf("/readyz = %d %q, want 503 with the reason", code, body)
	}
	health = nil
	lines[0] = []string{"stuck: the node doctor has been running for 1m0s"}
	for i := range 30 {
		lines[1] = append(lines[1], fmt.Sprintf("unchecked: VF %02d", i))
	}
	code, body := get("/healthz")
	got := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if code != http.StatusOK || len(got) != 1+maxStuckLines || got[0] != "ok" || got[1] != lines[0][0] ||
		got[2] != "unchecked: VF 00" || got[maxStuckLines-1] != "unchecked: VF 17" || got[maxStuckLines] != "… and 12 more" {
		t.Errorf("/healthz = %d:\n%s", code, body)
	}
}
