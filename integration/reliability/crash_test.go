package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

// crashStats counts where the kills landed, judged by what they left.
type crashStats struct {
	runs, addCompleted, addKilled   int
	killedUntouched, killedDown     int
	killedRenamed, killedRecorded   int
	delKilled, delRetried, tempLeft int
	addDur                          []time.Duration
}

// TestCrashDuringAdd kills the plugin with SIGKILL at a random moment of
// ADD (and, in half of the runs, of the DEL after it), over many runs. No
// production hook: the delay is drawn uniformly over the time an ADD takes,
// so the kills spread over every step (lock, sysfs, locate, down, rename,
// up, verify, record). After each kill: the VF has its old name or
// CNI_IFNAME, never a third; the record is absent or complete; the next
// DEL succeeds, leaves no record and hands the VF to host-device intact.
func TestCrashDuringAdd(t *testing.T) {
	runs := envInt(t, "SRIOV_CRASH_RUNS", 60)
	seed := uint64(envInt(t, "SRIOV_CRASH_SEED", int(time.Now().UnixNano()%1_000_000)+1))
	t.Logf("SRIOV_CRASH_SEED=%d reproduces this run's delays", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	nd := newNode(t, 1, true)
	hd := harness.NewChainWithCache(t, nd.bins, nd.cacheDir, harness.ConfList("1.1.0", network, hostDevice(nd.vfs[0].Host)))
	st := &crashStats{}

	// Calibrate: how long an uninterrupted ADD takes here, now.
	for i := range 5 {
		st.run(t, nd, hd, fmt.Sprintf("calib-%d", i), 0, false, rng)
	}
	span := percentile(st.addDur, 50) * 13 / 10
	t.Logf("ADD takes %s (median of 5); kills land uniformly in [0, %s]", ms(percentile(st.addDur, 50)), ms(span))
	*st = crashStats{}
	for i := range runs {
		delay := time.Duration(rng.Int64N(int64(span)))
		st.run(t, nd, hd, fmt.Sprintf("crash-%03d", i), delay, true, rng)
	}
	// Temp files of killed writes are swept by the next listing of the
	// records (GC, the monitor) once they are old enough; one in flight is
	// not. Age what the kills left, plant one more old one (on tmpfs few
	// kills land inside the write) and a fresh one, and send GC.
	leftByKills := len(nd.tempFiles())
	dir := filepath.Join(nd.stateDir, "attachments")
	for _, name := range []string{".tmp-killed", ".tmp-inflight"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"version":1,"net`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, f := range nd.tempFiles() {
		if filepath.Base(f) != ".tmp-inflight" {
			if err := os.Chtimes(f, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	figures := *st
	gc := stdin("1.1.0", harness.Merge(nd.ours(-1, nil), map[string]any{"cni.dev/valid-attachments": []any{}}), nil)
	if out := nd.run(invocation{Command: "GC", Stdin: gc}); out.Exit != 0 {
		t.Fatalf("GC: %v", out)
	}
	if tmp := nd.tempFiles(); len(tmp) != 1 || filepath.Base(tmp[0]) != ".tmp-inflight" {
		t.Errorf("after GC the temp files are %v, want only the fresh .tmp-inflight", tmp)
	}
	if left := nd.records(); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	if harness.HostLink(nd.vfs[0].Host) == nil {
		t.Errorf("stand-in is not on the host at the end")
	}
	st = &figures
	if st.addKilled == 0 || st.addCompleted == 0 {
		t.Errorf("kills did not spread: %d ADDs killed, %d completed; the delay span is wrong", st.addKilled, st.addCompleted)
	}
	t.Logf("crash figures (%d runs, SIGKILL during ADD, then DEL):\n"+
		"  ADD completed before the kill %d, killed %d:\n"+
		"    VF untouched %d, VF left down mid-rename %d, VF renamed without record %d, record written %d\n"+
		"  DEL killed too %d; DEL retried and completed %d; failed DELs 0\n"+
		"  half-written records 0, VF under a third name 0; temp files left by killed writes %d, swept by the next GC once old",
		runs, st.addCompleted, st.addKilled, st.killedUntouched, st.killedDown, st.killedRenamed, st.killedRecorded,
		st.delKilled, st.delRetried, leftByKills)
}

// run is one crash run: host-device moves the stand-in in, udev renames
// it to eth7, our ADD is killed after delay (never when kill is false),
// then DEL (perhaps killed too, then repeated) and host-device's DEL.
func (st *crashStats) run(t *testing.T, nd *node, hd *harness.Chain, id string, delay time.Duration, kill bool, rng *rand.Rand) {
	t.Helper()
	st.runs++
	pod := harness.NewNetns(t)
	defer harness.RemoveNetns(t, pod)
	r := rt(id, pod)
	prev, err := hd.Add(r)
	if err != nil {
		t.Fatalf("%s: host-device ADD: %v", id, err)
	}
	harness.RenameIn(t, pod, "net1", "eth7")
	conf := stdin("1.1.0", nd.ours(0, nil), prev)
	add := invocation{Command: "ADD", ContainerID: id, Netns: pod.Path(), IfName: "net1", Stdin: conf}

	killed, dur := nd.killAfter(t, add, delay, kill)
	if killed {
		st.addKilled++
	} else {
		st.addCompleted++
		st.addDur = append(st.addDur, dur)
	}

	// What the kill left: the VF under its old name or CNI_IFNAME, and a
	// record that is absent or whole.
	vf := podVF(t, pod)
	if vf.Name != "eth7" && vf.Name != "net1" {
		t.Fatalf("%s: VF left as %q after the kill at %s, want eth7 or net1", id, vf.Name, delay)
	}
	recs, err := nd.store().List()
	if err != nil {
		t.Fatalf("%s: half-written or unreadable record after the kill at %s: %v", id, delay, err)
	}
	switch {
	case len(recs) > 1:
		t.Fatalf("%s: %d records for one attachment", id, len(recs))
	case len(recs) == 1 && (recs[0].PCI != vfAddr(0) || recs[0].Netns != pod.Path() || recs[0].ContainerID != id || recs[0].MAC == ""):
		t.Fatalf("%s: record does not describe the attachment: %+v", id, recs[0])
	case len(recs) == 1 && vf.Name != "net1":
		t.Fatalf("%s: a record exists but the VF is still %s", id, vf.Name)
	}
	if !killed && (len(recs) != 1 || vf.Name != "net1" || !vf.Up) {
		t.Fatalf("%s: completed ADD left VF %+v and %d records", id, vf, len(recs))
	}
	if killed {
		switch {
		case len(recs) == 1:
			st.killedRecorded++
		case !vf.Up:
			st.killedDown++
		case vf.Name == "net1":
			st.killedRenamed++
		default:
			st.killedUntouched++
		}
	}

	del := invocation{Command: "DEL", ContainerID: id, Netns: pod.Path(), IfName: "net1", Stdin: conf}
	if kill && rng.IntN(2) == 0 {
		if k, _ := nd.killAfter(t, del, time.Duration(rng.Int64N(int64(delay+time.Millisecond))), true); k {
			st.delKilled++
		}
		if _, err := nd.store().List(); err != nil {
			t.Fatalf("%s: unreadable record after a killed DEL: %v", id, err)
		}
		st.delRetried++
	}
	if o := nd.run(del); o.Exit != 0 {
		t.Fatalf("%s: DEL after the crash: %s\nlog:\n%s", id, o, nd.logTail())
	}
	if left := nd.records(); len(left) != 0 {
		t.Fatalf("%s: records left after DEL: %v", id, left)
	}
	if got := podVF(t, pod); got.Name != "net1" {
		t.Fatalf("%s: after DEL the VF is %q; host-device looks for net1", id, got.Name)
	}
	if err := hd.Del(r); err != nil {
		t.Fatalf("%s: host-device DEL after ours: %v", id, err)
	}
	if got := harness.LinksIn(t, pod); !slices.Equal(got, []string{"lo"}) {
		t.Fatalf("%s: pod still holds %v", id, got)
	}
	if harness.HostLink(nd.vfs[0].Host) == nil {
		t.Fatalf("%s: stand-in not back on the host", id)
	}
}

// killAfter starts the plugin and, when kill is set, sends SIGKILL after
// delay. It reports whether the kill landed and how long the run took.
func (n *node) killAfter(t *testing.T, inv invocation, delay time.Duration, kill bool) (bool, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, out, errb := n.cmd(ctx, inv)
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatalf("start %s: %v", inv.Command, err)
	}
	if kill {
		timer := time.AfterFunc(delay, func() { _ = c.Process.Signal(syscall.SIGKILL) })
		defer timer.Stop()
	}
	err := c.Wait()
	dur := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("%s hung", inv.Command)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, dur
		}
		if err := panicIn(errb.Bytes()); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("%s failed without being killed: %v\nstdout: %s\nlog:\n%s", inv.Command, err, out.Bytes(), n.logTail())
	}
	if err != nil {
		t.Fatalf("%s: %v", inv.Command, err)
	}
	return false, dur
}

// vfView is the stand-in as seen in the pod.
type vfView struct {
	Name string
	Up   bool
}

// podVF finds the pod's one non-loopback link.
func podVF(t *testing.T, pod ns.NetNS) vfView {
	t.Helper()
	var views []vfView
	for _, l := range linkStates(t, pod) {
		if l.Name != "lo" {
			views = append(views, vfView{l.Name, l.Up})
		}
	}
	if len(views) != 1 {
		t.Fatalf("pod holds %+v, want exactly the VF", views)
	}
	return views[0]
}
