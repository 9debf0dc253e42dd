package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
)

// forgotten is a log handler that signals each "attachment record gone"
// the monitor logs, its own word that it has forgotten a record, and drops
// everything else.
type forgotten chan struct{}

func (f forgotten) Enabled(context.Context, slog.Level) bool { return true }
func (f forgotten) WithAttrs([]slog.Attr) slog.Handler       { return f }
func (f forgotten) WithGroup(string) slog.Handler            { return f }
func (f forgotten) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "attachment record gone (DEL or GC)" {
		f <- struct{}{}
	}
	return nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// removeOneByOne runs a monitor, with events, over n records whose netns
// are gone, then removes the records one after another, each once the
// monitor has forgotten the one before, as DEL or GC would; it returns the
// CPU time of the process over the removals.
func removeOneByOne(t *testing.T, n int) time.Duration {
	t.Helper()
	dir := t.TempDir()
	store := state.NewStore(dir)
	gone := filepath.Join(t.TempDir(), "gone")
	keys := make([]state.Key, n)
	for i := range n {
		r := record("ib-a", fmt.Sprintf("c%05d", i), gone)
		r.PCI = testutil.VFAddr(i)
		if err := store.Save(r); err != nil {
			t.Fatal(err)
		}
		keys[i] = r.Key()
	}
	signal := make(forgotten, n)
	m, err := New(Config{StateDir: dir, SysfsRoot: t.TempDir(), Interval: time.Hour, Logger: slog.New(signal)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	stale := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		c := 0
		for _, a := range m.atts {
			if a.status == status.Stale {
				c++
			}
		}
		return c
	}
	for deadline := time.Now().Add(30 * time.Second); stale() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records checked within 30s", stale(), n)
		}
	}
	before := cpuTime(t)
	for i, k := range keys {
		if err := store.Delete(k); err != nil {
			t.Fatal(err)
		}
		select {
		case <-signal:
		case <-time.After(30 * time.Second):
			t.Fatalf("record %d of %d not forgotten within 30s of its removal", i+1, n)
		}
	}
	return cpuTime(t) - before
}

// An event about one record reads that record: removing N records one
// after another costs the monitor O(N), not O(N²) as when each event read
// the whole directory. The CPU time per removal with 1,500 records may not
// exceed twice that with 500 (reading every record left on each event made
// it three times as much).
func TestRecordEventCostDoesNotGrowWithRecords(t *testing.T) {
	// The CPU time of one round is tens of milliseconds, a few of the
	// kernel's accounting ticks: each size's figure is the median of
	// three rounds, so one round counted a tick short or long does not
	// decide.
	median := func(n int) time.Duration {
		runs := []time.Duration{removeOneByOne(t, n), removeOneByOne(t, n), removeOneByOne(t, n)}
		slices.Sort(runs)
		return runs[1]
	}
	small, large := median(500), median(1500)
	perSmall, perLarge := small/500, large/1500
	t.Logf("CPU for removing records one by one (median of 3 rounds): 500 in %.3fs (%s each), 1,500 in %.3fs (%s each)",
		small.Seconds(), perSmall, large.Seconds(), perLarge)
	if perLarge > 2*perSmall {
		t.Errorf("a removal costs %s of CPU among 1,500 records, %s among 500: the cost per event grows with the record count", perLarge, perSmall)
	}
}

// Each event about a record file brings that record up to date with no
// sweep: a record written is watched, one saved again for a new sandbox
// replaces it, one removed is forgotten, and a record under a file name
// that is not its key's (not the plugin's doing) is still seen, by reading
// the directory again.
func TestRecordEventsOneFile(t *testing.T) {
	f := newFixture(t, Config{Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.mon.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	netnsOf := func(k state.Key) string {
		f.mon.mu.Lock()
		defer f.mon.mu.Unlock()
		if a := f.mon.atts[k]; a != nil {
			return a.rec.Netns
		}
		return ""
	}
	waitNetns := func(what string, k state.Key, want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); netnsOf(k) != want; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the monitor knows %s with netns %q, want %q\n%s", what, k, netnsOf(k), want, f.logs)
			}
		}
	}
	gone := filepath.Join(t.TempDir(), "gone")
	r := record("ib-a", "c1", gone+"-1")
	if err := f.store.Save(r); err != nil {
		t.Fatal(err)
	}
	waitNetns("a record written", r.Key(), r.Netns)
	again := *r
	again.Netns, again.Created = gone+"-2", time.Now().UTC().Add(time.Second)
	if err := f.store.Save(&again); err != nil {
		t.Fatal(err)
	}
	waitNetns("the record saved again for a new sandbox", r.Key(), again.Netns)
	if err := f.store.Delete(r.Key()); err != nil {
		t.Fatal(err)
	}
	waitNetns("the record removed", r.Key(), "")

	foreign := record("ib-a", "c2", gone+"-3")
	foreign.Version = state.RecordVersion
	b, err := json.Marshal(foreign)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.store.Dir(), "attachments", "not-its-name.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	waitNetns("a record under a foreign name", foreign.Key(), foreign.Netns)
	f.wantValue(t, 1, "sriov_stable_sweeps_total")
}

// A sweep's listing taken before a record was written, reconciled after an
// event about that record tracked it, leaves it tracked (CI saw it dropped
// in TestRecordEventsOneFile); once the file is gone the same reconcile
// drops it.
func TestStaleListingKeepsNewRecord(t *testing.T) {
	f := newFixture(t, Config{Interval: time.Hour})
	stale, err := f.store.List() // the sweep lists: nothing yet
	if err != nil {
		t.Fatal(err)
	}
	r := record("ib-a", "c1", filepath.Join(t.TempDir(), "gone"))
	if err := f.store.Save(r); err != nil {
		t.Fatal(err)
	}
	f.mon.reconcileFile(state.FileName(r.Key())) // the event about it
	known := func() bool {
		f.mon.mu.Lock()
		defer f.mon.mu.Unlock()
		return f.mon.atts[r.Key()] != nil
	}
	if !known() {
		t.Fatal("the event did not track the record")
	}
	f.mon.reconcile(stale) // the sweep reconciles its old listing
	if !known() {
		t.Fatal("a sweep's listing older than the record dropped it")
	}
	if err := f.store.Delete(r.Key()); err != nil {
		t.Fatal(err)
	}
	f.mon.reconcile(stale)
	if known() {
		t.Error("the record deleted, the attachment is still tracked")
	}
}
