package monitor

import (
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

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/promexport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// syncBuffer is a log sink safe for the monitor's goroutines.
type syncBuffer = testutil.LogBuffer

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
	reg.MustRegister(promexport.NewCollector(promexport.Sources{Attachments: m.Snapshot}))
	return &fixture{mon: m, store: state.NewStore(cfg.StateDir), reg: reg, logs: logs}
}

// handler serves the fixture's registry, with the monitor's probes, as
// the agent does.
func (f *fixture) handler() http.Handler {
	return promexport.Handler(f.reg, promexport.Probes{Health: f.mon.Health, Ready: f.mon.Ready,
		Stuck: []func(time.Time) []string{f.mon.Stuck}})
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
	return promtest.Value(t, f.reg, name, labels...)
}

func (f *fixture) wantValue(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	promtest.Want(t, f.reg, want, name, labels...)
}

// A drift is logged once when it appears and once when it recovers, however
// many sweeps see it; the gauges follow every sweep.
func TestDriftLoggedOnceAndRecovered(t *testing.T) {
	f := newFixture(t, Config{})
	rec := record("ib-a", "c1", "/run/netns/pod1")
	renamed := []drift.Finding{{Reason: drift.Renamed, Detail: `VF is named "eth3", want "net1"`}}
	steps := []struct {
		findings []drift.Finding
		status   status.AttachmentStatus
		renamed  float64
	}{
		{nil, status.OK, 0},
		{renamed, status.Drifted, 1},
		{renamed, status.Drifted, 1},
		{append(renamed, drift.Finding{Reason: drift.PortDown, Detail: "no carrier"}), status.Drifted, 1},
		{nil, status.OK, 0},
		{nil, status.OK, 0},
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
	if n := f.logs.Count(`msg="drift detected"`); n != 2 {
		t.Errorf("logged %d drift detections, want 2 (renamed, then port-down):\n%s", n, f.logs)
	}
	if n := f.logs.Count(`msg="drift recovered"`); n != 2 {
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
	if n := f.logs.Count(`msg="cannot check attachment"`); n != 2 {
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
	if n := f.logs.Count("its record is removed after the grace period"); n != 1 {
		t.Errorf("logged the vanished netns %d times, want once:\n%s", n, f.logs)
	}
	if n := f.logs.Count("removed the record"); n != 1 {
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
	a := &attachment{rec: old, status: status.Stale, staleSince: time.Now()}
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
	if n := g.logs.Count("cannot list attachment records"); n != 1 {
		t.Errorf("logged the listing failure %d times, want once:\n%s", n, g.logs)
	}
}

func TestProbesAndMetricsEndpoint(t *testing.T) {
	f := newFixture(t, Config{Interval: 100 * time.Millisecond})
	srv := httptest.NewServer(f.handler())
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

// A notifier hears each drift change once, with its detail; never while
// the monitor holds its lock.
func TestNotifierHearsChanges(t *testing.T) {
	rec := &recorder{}
	f := newFixture(t, Config{Notifiers: []Notifier{rec}})
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
}
