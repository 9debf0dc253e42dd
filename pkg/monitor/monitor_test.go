package monitor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// syncBuffer is a log sink safe for the monitor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

// lines counts the lines holding every one of parts.
func (s *syncBuffer) lines(parts ...string) int {
	n := 0
	for _, line := range strings.Split(s.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	mon   *Monitor
	store *state.Store
	reg   *prometheus.Registry
	logs  *syncBuffer
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	return &fixture{mon: m, store: state.NewStore(cfg.StateDir), reg: reg, logs: logs}
}

func record(network, id, netns string) *state.Record {
	return &state.Record{
		Network: network, ContainerID: id, IfName: "net1", Netns: netns, PCI: "0000:18:00.2", PF: "0000:18:00.0",
		AltName: "vf-0000-18-00.2", MAC: "02:00:00:00:00:01", MTU: 1500, LinkLayer: "ethernet",
		PortPolicy: "require", GUIDPolicy: "require", SysfsRoot: "/sys", Created: time.Now().UTC(),
	}
}

// value returns the value of the series name{labels}, and whether it exists.
func (f *fixture) value(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m.GetLabel(), want) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func labelsMatch(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func (f *fixture) wantValue(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := f.value(t, name, labels...)
	if !ok || got != want {
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
	}
}

// A drift is logged once when it appears and once when it recovers, however
// many sweeps see it; the gauges follow every sweep.
func TestDriftLoggedOnceAndRecovered(t *testing.T) {
	f := newFixture(t, Config{})
	rec := record("ib-a", "c1", "/run/netns/pod1")
	renamed := []drift.Finding{{Reason: drift.Renamed, Detail: `VF is named "eth3", want "net1"`}}
	steps := []struct {
		findings []drift.Finding
		status   Status
		renamed  float64
	}{
		{nil, StatusOK, 0},
		{renamed, StatusDrifted, 1},
		{renamed, StatusDrifted, 1},
		{append(renamed, drift.Finding{Reason: drift.PortDown, Detail: "no carrier"}), StatusDrifted, 1},
		{nil, StatusOK, 0},
		{nil, StatusOK, 0},
	}
	for i, s := range steps {
		f.mon.apply([]*state.Record{rec}, []outcome{{findings: s.findings}}, time.Now())
		f.wantValue(t, 1, "sriov_stable_attachments", "network", "ib-a", "status", string(s.status))
		f.wantValue(t, s.renamed, "sriov_stable_attachment_drift", "network", "ib-a", "reason", "renamed")
		if t.Failed() {
			t.Fatalf("after step %d:\n%s", i, f.logs)
		}
	}
	for _, r := range drift.Reasons {
		if _, ok := f.value(t, "sriov_stable_attachment_drift", "network", "ib-a", "reason", string(r)); !ok {
			t.Errorf("no zero series for reason %s", r)
		}
	}
	if n := f.logs.count(`msg="drift detected"`); n != 2 {
		t.Errorf("logged %d drift detections, want 2 (renamed, then port-down):\n%s", n, f.logs)
	}
	if n := f.logs.count(`msg="drift recovered"`); n != 2 {
		t.Errorf("logged %d recoveries, want 2:\n%s", n, f.logs)
	}
	f.wantValue(t, 1, "sriov_stable_drift_events_total", "network", "ib-a", "reason", "renamed")
	f.wantValue(t, 1, "sriov_stable_drift_events_total", "network", "ib-a", "reason", "port-down")
	// The record goes away (DEL): so do its series.
	f.mon.apply(nil, nil, time.Now())
	if _, ok := f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok"); ok {
		t.Errorf("series of a deleted attachment remain")
	}
}

// A check that fails keeps the last known drift and is logged once per
// distinct error.
func TestCheckErrorsLoggedOnce(t *testing.T) {
	f := newFixture(t, Config{})
	rec := record("ib-a", "c1", "/run/netns/pod1")
	f.mon.apply([]*state.Record{rec}, []outcome{{findings: []drift.Finding{{Reason: drift.MAC, Detail: "changed"}}}}, time.Now())
	for range 3 {
		f.mon.apply([]*state.Record{rec}, []outcome{{err: io.ErrUnexpectedEOF}}, time.Now())
	}
	f.mon.apply([]*state.Record{rec}, []outcome{{err: context.DeadlineExceeded, timedOut: true}}, time.Now())
	f.wantValue(t, 1, "sriov_stable_attachments", "network", "ib-a", "status", "unknown")
	f.wantValue(t, 1, "sriov_stable_attachment_drift", "network", "ib-a", "reason", "mac")
	f.wantValue(t, 3, "sriov_stable_check_errors_total")
	if n := f.logs.count(`msg="cannot check attachment"`); n != 2 {
		t.Errorf("logged %d check failures, want 2 (one per distinct error):\n%s", n, f.logs)
	}
}

// A record whose netns is gone is stale; after the grace period it is
// removed, once, and its series go with it.
func TestStaleRecordRemovedAfterGrace(t *testing.T) {
	f := newFixture(t, Config{StaleGrace: 150 * time.Millisecond})
	gone := record("ib-a", "c-gone", filepath.Join(t.TempDir(), "no-such-netns"))
	if err := f.store.Save(gone); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.mon.Sweep(ctx)
	f.wantValue(t, 1, "sriov_stable_attachments", "network", "ib-a", "status", "stale")
	if _, err := f.store.Load(gone.Key()); err != nil {
		t.Fatalf("record removed before the grace period: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mon.Sweep(ctx)
		if _, err := f.store.Load(gone.Key()); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stale record still there after 5s with a 150ms grace:\n%s", f.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.mon.Sweep(ctx)
	f.wantValue(t, 1, "sriov_stable_stale_records_removed_total")
	if _, ok := f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "stale"); ok {
		t.Error("stale series remains after the record was removed")
	}
	if n := f.logs.count("its record is removed after the grace period"); n != 1 {
		t.Errorf("logged the vanished netns %d times, want once:\n%s", n, f.logs)
	}
	if n := f.logs.count("removed the record"); n != 1 {
		t.Errorf("logged the removal %d times, want once:\n%s", n, f.logs)
	}
}

// A stale record that a new attachment replaced under the same key is not
// removed.
func TestStaleRemovalSparesReplacedRecord(t *testing.T) {
	f := newFixture(t, Config{StaleGrace: time.Nanosecond})
	old := record("ib-a", "c1", filepath.Join(t.TempDir(), "gone"))
	if err := f.store.Save(old); err != nil {
		t.Fatal(err)
	}
	a := &attachment{rec: old, status: StatusStale, staleSince: time.Now()}
	replaced := *old
	replaced.Netns = "/run/netns/new"
	if err := f.store.Save(&replaced); err != nil {
		t.Fatal(err)
	}
	f.mon.removeStale(a)
	if _, err := f.store.Load(old.Key()); err != nil {
		t.Errorf("the replacing record was removed: %v", err)
	}
}

func TestUnreadableRecordsAndStateDir(t *testing.T) {
	f := newFixture(t, Config{})
	if err := f.store.Save(record("ib-a", "c1", filepath.Join(t.TempDir(), "gone"))); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(f.store.Dir(), "attachments", "ib-a_broken_net1.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.mon.Sweep(context.Background())
	f.wantValue(t, 1, "sriov_stable_record_read_errors")
	f.wantValue(t, 1, "sriov_stable_attachments", "network", "ib-a", "status", "stale")
	if err := f.mon.Ready(); err != nil {
		t.Errorf("not ready with one bad record file: %v", err)
	}

	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFixture(t, Config{StateDir: file})
	g.mon.Sweep(context.Background())
	g.mon.Sweep(context.Background())
	if err := g.mon.Ready(); err == nil {
		t.Error("ready although the state dir cannot be listed")
	}
	if n := g.logs.count("cannot list attachment records"); n != 1 {
		t.Errorf("logged the listing failure %d times, want once:\n%s", n, g.logs)
	}
}

func TestDoctorFindingsAsGauges(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	vf := n.PFs[2].VFs[1]
	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: "0000:0000:0000:0000", Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	f := newFixture(t, Config{Doctor: &doctor.Options{SysfsRoot: n.Root, ExpectVFs: 8}})
	if _, ok := f.value(t, "sriov_stable_doctor_up"); ok {
		t.Error("doctor metrics before the doctor ran")
	}
	f.mon.RunDoctor(context.Background())
	f.wantValue(t, 1, "sriov_stable_doctor_up")
	f.wantValue(t, 1, "sriov_stable_doctor_finding", "check", doctor.CheckGUIDInvalid, "severity", "error", "subject", vf.PCI)
	f.wantValue(t, 1, "sriov_stable_doctor_findings", "severity", "error")
	f.wantValue(t, 0, "sriov_stable_doctor_findings", "severity", "warning")
	f.mon.RunDoctor(context.Background())
	if n := f.logs.count(`msg="node doctor finding"`); n != 1 {
		t.Errorf("logged the finding %d times over two runs, want once:\n%s", n, f.logs)
	}

	// Repaired: the finding clears, and its series goes.
	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	f.mon.RunDoctor(context.Background())
	if _, ok := f.value(t, "sriov_stable_doctor_finding", "check", doctor.CheckGUIDInvalid, "severity", "error", "subject", vf.PCI); ok {
		t.Error("series of a cleared finding remains")
	}
	if n := f.logs.count(`msg="node doctor finding cleared"`); n != 1 {
		t.Errorf("logged the clearing %d times, want once:\n%s", n, f.logs)
	}

	g := newFixture(t, Config{Doctor: &doctor.Options{SysfsRoot: filepath.Join(t.TempDir(), "missing")}})
	g.mon.RunDoctor(context.Background())
	g.wantValue(t, 0, "sriov_stable_doctor_up")
}

func TestProbesAndMetricsEndpoint(t *testing.T) {
	f := newFixture(t, Config{Interval: 100 * time.Millisecond})
	srv := httptest.NewServer(f.mon.Handler(f.reg))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before any sweep: %d %s, want 503", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a fresh monitor: %d %s, want 200", code, body)
	}
	f.mon.Sweep(context.Background())
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a sweep: %d %s, want 200", code, body)
	}
	code, body := get("/metrics")
	if code != http.StatusOK || !strings.Contains(body, "sriov_stable_sweeps_total 1") {
		t.Errorf("/metrics: %d, want 200 with sriov_stable_sweeps_total 1:\n%s", code, body)
	}
	// A sweep loop that stopped makes the liveness probe fail.
	f.mon.mu.Lock()
	f.mon.lastSweep = time.Now().Add(-time.Minute)
	f.mon.mu.Unlock()
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no sweep completed") {
		t.Errorf("/healthz with a stalled loop: %d %s, want 503", code, body)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{},
		{StateDir: "/x", Interval: -time.Second},
		{StateDir: "/x", Interval: time.Second, CheckTimeout: 2 * time.Second},
		{StateDir: "/x", StaleGrace: -time.Second},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted a bad configuration", c)
		}
	}
	m, err := New(Config{StateDir: "/x", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.CheckTimeout != 100*time.Millisecond {
		t.Errorf("default check timeout for a 200ms interval is %s, want 100ms", m.cfg.CheckTimeout)
	}
}

// Run sweeps every interval until its context ends.
func TestRunSweepsEveryInterval(t *testing.T) {
	f := newFixture(t, Config{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.mon.Run(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := f.value(t, "sriov_stable_sweeps_total"); v >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 sweeps in 5s with a 20ms interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// recorder is a Notifier that keeps what it heard.
type recorder struct {
	mu       sync.Mutex
	heard    []string
	repaired []string
	reports  int
	last     *doctor.Report
}

func (r *recorder) Drift(rec *state.Record, appeared []drift.Finding, cleared []drift.Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range appeared {
		r.heard = append(r.heard, rec.ContainerID+" +"+string(f.Reason)+" "+f.Detail)
	}
	for _, c := range cleared {
		r.heard = append(r.heard, rec.ContainerID+" -"+string(c))
	}
}

func (r *recorder) Repaired(rec *state.Record, kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	who := rec.ContainerID
	if who == "" {
		who = rec.PCI
	}
	r.repaired = append(r.repaired, who+" "+kind+": "+detail)
}

func (r *recorder) repairs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.repaired)
}

func (r *recorder) Doctor(rep *doctor.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports++
	r.last = rep
}

// lastReport is the last report heard and how many were.
func (r *recorder) lastReport() (*doctor.Report, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.reports
}

// A notifier hears each drift change once, with its detail, and each
// completed doctor run; never while the monitor holds its lock.
func TestNotifierHearsChanges(t *testing.T) {
	rec := &recorder{}
	n := sysfstest.NewDGXH200(t)
	f := newFixture(t, Config{Notifiers: []Notifier{rec}, Doctor: &doctor.Options{SysfsRoot: n.Root}})
	r := record("ib-a", "c1", "/run/netns/pod1")
	renamed := drift.Finding{Reason: drift.Renamed, Detail: "named eth3"}
	port := drift.Finding{Reason: drift.PortDown, Detail: "no carrier"}
	for _, findings := range [][]drift.Finding{nil, {renamed}, {renamed}, {renamed, port}, {port}, nil} {
		_, notes := f.mon.apply([]*state.Record{r}, []outcome{{findings: findings}}, time.Now())
		for _, note := range notes {
			if !f.mon.mu.TryLock() {
				t.Fatal("a notifier would be called under the monitor's lock")
			}
			f.mon.mu.Unlock()
			note()
		}
	}
	want := []string{"c1 +renamed named eth3", "c1 +port-down no carrier", "c1 -renamed", "c1 -port-down"}
	if diff := cmp.Diff(want, rec.heard); diff != "" {
		t.Errorf("heard (-want +got):\n%s", diff)
	}
	f.mon.RunDoctor(context.Background())
	f.mon.RunDoctor(context.Background())
	if rec.reports != 2 {
		t.Errorf("heard %d doctor reports after 2 runs", rec.reports)
	}
}
