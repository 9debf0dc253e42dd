package reliability_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/crashpoint"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// killPoint is one scenario of the crash test: the crash point the plugin
// is killed at, what makes it pass there, and what the kill must leave.
type killPoint struct {
	point   crashpoint.Point
	del     bool           // a point of DEL: ADD completes, the DEL after it is killed
	extra   map[string]any // merged into our entry
	plant   bool           // a directory where the record goes, so Save fails
	lostDEL bool           // the runtime never repeats the killed DEL
	why     string         // how ADD gets there, for the figures
	want    left
}

// left is what a kill left, as the test sees it before any DEL.
type left struct {
	VF     string // the VF's name in the pod (ADD found it as eth7)
	Record bool   // a whole record of this attachment
	Owner  owner  // the VF's owner index
	Temps  int    // temp files the kill added to the records dir
}

// owner is what the owner index in the VF's lock file says.
type owner int

const (
	ownerAsBefore owner = iota // as before this run's ADD
	ownerThis                  // names this attachment's record
	ownerFree                  // "free"
)

// killPoints are the scenarios, each run in turn. A kill at any of them
// must leave exactly its want: the VF under eth7 (as ADD found it) or net1,
// never a third name, and always up with its altname; a record that is
// absent or whole; the owner index as want says. Then the runtime's DEL,
// repeated until it completes, must leave no record, the VF as net1 for
// host-device, and an owner index that names no record; host-device's DEL
// must take the VF home; and the next ADD of the VF must get past the
// ownership check.
var killPoints = []killPoint{
	{point: crashpoint.Renamed, why: "udev named the VF eth7",
		want: left{VF: "net1", Owner: ownerAsBefore}},
	{point: crashpoint.OwnerSet,
		want: left{VF: "net1", Owner: ownerThis}},
	{point: crashpoint.TempWritten, why: "the record's write",
		want: left{VF: "net1", Owner: ownerThis, Temps: 1}},
	{point: crashpoint.Recorded,
		want: left{VF: "net1", Record: true, Owner: ownerThis}},
	{point: crashpoint.UndoOwnerFreed, plant: true, why: "Save fails: a directory where the record goes",
		want: left{VF: "net1", Owner: ownerFree}},
	{point: crashpoint.UndoRenamedBack, extra: map[string]any{"mtu": 1280}, why: "verify fails: mtu 1280, the VF has 1500",
		want: left{VF: "eth7", Owner: ownerAsBefore}},
	{point: crashpoint.DelHandedBack, del: true,
		want: left{VF: "net1", Record: true, Owner: ownerThis}},
	{point: crashpoint.DelRecordRemoved, del: true,
		want: left{VF: "net1", Owner: ownerThis}},
	{point: crashpoint.DelRecordRemoved, del: true, lostDEL: true, why: "the DEL is never repeated",
		want: left{VF: "net1", Owner: ownerThis}},
}

// crashStats counts, per scenario, the kills and what they left.
type crashStats struct {
	kills      []int            // per scenario
	seen       []map[string]int // per scenario: what the kills left, described
	dels       []int            // per scenario: DEL runs, killed ones included
	cleanAdds  int              // ADDs run without a crash point, all completed
	killed     bool             // a kill happened already
	pastClaims int              // ADDs after a kill that got past the ownership check
	afterLost  int              // of them, ADDs with the owner index naming a lost DEL's gone record
	delChecks  int              // completed DELs after which the state was checked
	tempsLeft  int              // temp files the kills left
}

// TestCrashDuringAdd kills the plugin with SIGKILL inside its own steps:
// the binary is built with the crashpoints tag (internal/crashpoint), and
// each run names one point of ADD or DEL at which the plugin kills itself,
// after a rename, after indexing the VF's owner, between writing the
// record's temp file and renaming it into place, after the record, during
// a failed ADD's rollback, and inside DEL. The scenarios run in turn in a
// shuffled order, so every point is hit at least once whenever
// SRIOV_CRASH_RUNS is at least their number. Every kill must land at its
// point, leave exactly the state its scenario expects, and be repaired by
// the runtime's DEL; what the figures print is counted from the runs.
func TestCrashDuringAdd(t *testing.T) {
	runs := envInt(t, "SRIOV_CRASH_RUNS", 60)
	if runs < len(killPoints) {
		t.Fatalf("SRIOV_CRASH_RUNS=%d: want at least %d, one run per kill scenario", runs, len(killPoints))
	}
	seed := uint64(envInt(t, "SRIOV_CRASH_SEED", int(time.Now().UnixNano()%1_000_000)+1))
	t.Logf("SRIOV_CRASH_SEED=%d reproduces this run's order of kill points", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	nd := newNode(t, 1, true)
	nd.bins = crashBins(t, nd.bins)
	hd := harness.NewChainWithCache(t, nd.bins, nd.cacheDir, harness.ConfList("1.1.0", network, hostDevice(nd.vfs[0].Host)))
	st := &crashStats{kills: make([]int, len(killPoints)), seen: make([]map[string]int, len(killPoints)), dels: make([]int, len(killPoints))}

	// A first ADD without a crash point saves the node's GUID index, so the
	// one state file an ADD writes afterwards is its record.
	st.clean(t, nd, hd, "clean-first")
	var order []int
	for i := range runs {
		if i%len(killPoints) == 0 {
			order = rng.Perm(len(killPoints))
		}
		k := order[i%len(killPoints)]
		st.crash(t, nd, hd, fmt.Sprintf("crash-%03d", i), k)
	}
	st.clean(t, nd, hd, "clean-last")
	for k, n := range st.kills {
		if n == 0 {
			t.Errorf("kill point %s (scenario %d) never hit in %d runs", killPoints[k].point, k, runs)
		}
	}

	// Every temp file a kill left is swept by the next listing of the
	// records (GC, the monitor) once old enough; one in flight is not.
	temps := nd.tempFiles()
	if len(temps) != st.tempsLeft {
		t.Errorf("%d temp files in the records dir, the kills left %d: %v", len(temps), st.tempsLeft, temps)
	}
	old := time.Now().Add(-time.Hour)
	for _, f := range temps {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	inflight := filepath.Join(nd.stateDir, "attachments", ".tmp-inflight")
	if err := os.WriteFile(inflight, []byte(`{"version":1,"net`), 0o600); err != nil {
		t.Fatal(err)
	}
	gc := stdin("1.1.0", testutil.Merge(nd.ours(-1, nil), map[string]any{"cni.dev/valid-attachments": []any{}}), nil)
	if out := nd.run(invocation{Command: "GC", Stdin: gc}); out.Exit != 0 {
		t.Fatalf("GC: %v", out)
	}
	if tmp := nd.tempFiles(); !slices.Equal(tmp, []string{inflight}) {
		t.Errorf("after GC the temp files are %v, want only the fresh %s", tmp, filepath.Base(inflight))
	}
	if left := nd.records(); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	if testutil.HostLink(nd.vfs[0].Host) == nil {
		t.Errorf("stand-in is not on the host at the end")
	}
	t.Log(st.figures(runs, seed, len(temps)))
}

// figures renders what the runs counted.
func (st *crashStats) figures(runs int, seed uint64, temps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "crash figures (%d runs, SRIOV_CRASH_SEED=%d, SIGKILL at a crash point, then the runtime's DEL):\n", runs, seed)
	for k, kp := range killPoints {
		verb := "ADD"
		if kp.del {
			verb = "DEL"
		}
		var seen []string
		for desc, n := range st.seen[k] {
			seen = append(seen, fmt.Sprintf("%s ×%d", desc, n))
		}
		slices.Sort(seen)
		name := string(kp.point)
		if kp.why != "" {
			name += " (" + kp.why + ")"
		}
		fmt.Fprintf(&b, "  %s %s: killed %d, DEL runs %d; left %s\n", verb, name, st.kills[k], st.dels[k], strings.Join(seen, "; "))
	}
	fmt.Fprintf(&b, "  ADDs after a kill that got past the ownership check %d (%d with the owner index naming a lost DEL's gone record); "+
		"ADDs without a crash point %d, all completed\n", st.pastClaims, st.afterLost, st.cleanAdds)
	fmt.Fprintf(&b, "  completed DELs checked (no record, VF net1 with its altname, owner index naming no record) %d\n", st.delChecks)
	fmt.Fprintf(&b, "  temp files left by killed writes %d, swept by GC once old (a fresh one kept)", temps)
	return b.String()
}

// attach has host-device move the stand-in into a new pod and renames it
// eth7 there, as udev would, before our ADD. It returns the pod,
// host-device's result and a func removing the pod.
func attach(t *testing.T, hd *harness.Chain, id string) (ns.NetNS, types.Result, func()) {
	t.Helper()
	pod := testutil.NewNetns(t)
	prev, err := hd.Add(rt(id, pod))
	if err != nil {
		t.Fatalf("%s: host-device ADD: %v", id, err)
	}
	testutil.RenameIn(t, pod, "net1", "eth7")
	return pod, prev, func() { testutil.RemoveNetns(t, pod) }
}

// detach runs host-device's DEL and checks the stand-in went home.
func detach(t *testing.T, nd *node, hd *harness.Chain, id string, pod ns.NetNS) {
	t.Helper()
	if err := hd.Del(rt(id, pod)); err != nil {
		t.Fatalf("%s: host-device DEL after ours: %v", id, err)
	}
	if got := testutil.LinksIn(t, pod); !slices.Equal(got, []string{"lo"}) {
		t.Fatalf("%s: pod still holds %v", id, got)
	}
	if testutil.HostLink(nd.vfs[0].Host) == nil {
		t.Fatalf("%s: stand-in not back on the host", id)
	}
}

// invocations are our ADD and DEL of attachment id in pod, after prev.
func (nd *node) invocations(id string, pod ns.NetNS, prev types.Result, extra map[string]any) (add, del invocation) {
	conf := stdin("1.1.0", nd.ours(0, extra), prev)
	add = invocation{Command: "ADD", ContainerID: id, Netns: pod.Path(), IfName: "net1", Stdin: conf}
	del = invocation{Command: "DEL", ContainerID: id, Netns: pod.Path(), IfName: "net1", Stdin: conf}
	return add, del
}

// clean is a run without a crash point: ADD completes and DEL cleans up.
func (st *crashStats) clean(t *testing.T, nd *node, hd *harness.Chain, id string) {
	t.Helper()
	pod, prev, done := attach(t, hd, id)
	defer done()
	add, del := nd.invocations(id, pod, prev, nil)
	before := nd.ownerIndex(t)
	if o := nd.run(add); o.Exit != 0 {
		t.Fatalf("%s: ADD without a crash point: %v\nlog:\n%s", id, o, nd.logTail())
	}
	st.cleanAdds++
	st.pastClaim(before)
	nd.checkCompletedAdd(t, id, pod)
	if o := nd.run(del); o.Exit != 0 {
		t.Fatalf("%s: DEL: %v\nlog:\n%s", id, o, nd.logTail())
	}
	st.checkAfterDel(t, nd, id, pod)
	detach(t, nd, hd, id, pod)
}

// crash is one run of scenario k: ADD, or the DEL after it, killed at
// the scenario's point; the kill's leftovers checked; the runtime's DEL
// repeated until it completes (unless the scenario loses it);
// host-device's DEL.
func (st *crashStats) crash(t *testing.T, nd *node, hd *harness.Chain, id string, k int) {
	t.Helper()
	kp := killPoints[k]
	pod, prev, done := attach(t, hd, id)
	defer done()
	add, del := nd.invocations(id, pod, prev, kp.extra)
	key := state.Key{Network: network, ContainerID: id, IfName: "net1"}
	before := nd.ownerIndex(t)
	temps := len(nd.tempFiles())
	if kp.plant {
		if err := os.Mkdir(nd.store().Path(key), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	point := crashpoint.Env + "=" + string(kp.point)
	add.Env, del.Env = []string{point}, []string{point}

	killed, o := nd.runToKill(t, add)
	if kp.plant {
		// The test's, not the plugin's: gone before anyone looks.
		if err := os.Remove(nd.store().Path(key)); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case kp.del && killed:
		t.Fatalf("%s: ADD killed, but %s is a point of DEL", id, kp.point)
	case kp.del && o.Exit != 0:
		t.Fatalf("%s: ADD: %v\nlog:\n%s", id, o, nd.logTail())
	case !kp.del && !killed:
		t.Fatalf("%s: crash point %s not reached: ADD ended %v\nlog:\n%s", id, kp.point, o, nd.logTail())
	}
	st.pastClaim(before)
	if kp.del {
		nd.checkCompletedAdd(t, id, pod)
		killed, o = nd.runToKill(t, del)
		st.dels[k]++
		if !killed {
			t.Fatalf("%s: crash point %s not reached: DEL ended %v\nlog:\n%s", id, kp.point, o, nd.logTail())
		}
	}
	st.kills[k]++
	st.killed = true
	got, desc := nd.leftBy(t, id, pod, key, before, temps, kp.want.Owner)
	if st.seen[k] == nil {
		st.seen[k] = map[string]int{}
	}
	st.seen[k][desc]++
	st.tempsLeft += got.Temps
	if got != kp.want {
		t.Fatalf("%s: killed at %s, left %s; want %s\nlog:\n%s", id, kp.point, got, kp.want, nd.logTail())
	}

	if kp.lostDEL {
		// The runtime gave up on our DEL; host-device's still runs (the
		// VF was handed back), and the next run's ADD must not be
		// blocked by the owner index naming a record that is gone.
		detach(t, nd, hd, id, pod)
		return
	}
	del.Env = nil
	if o := nd.run(del); o.Exit != 0 {
		t.Fatalf("%s: DEL after the kill at %s: %v\nlog:\n%s", id, kp.point, o, nd.logTail())
	}
	st.dels[k]++
	st.checkAfterDel(t, nd, id, pod)
	detach(t, nd, hd, id, pod)
}

// pastClaim counts an ADD that was killed at its point or completed, so
// got past the ownership check a record or an owner index left by an
// earlier kill could fail; before is the owner index it found.
func (st *crashStats) pastClaim(before string) {
	if !st.killed {
		return
	}
	st.pastClaims++
	if _, named := parseOwnerLine(before); named {
		st.afterLost++ // only a lost DEL leaves the index naming a record between runs
	}
}

// checkCompletedAdd: the VF is net1 and up with its altname, its record
// whole, the owner index naming it.
func (nd *node) checkCompletedAdd(t *testing.T, id string, pod ns.NetNS) {
	t.Helper()
	key := state.Key{Network: network, ContainerID: id, IfName: "net1"}
	want := left{VF: "net1", Record: true, Owner: ownerThis}
	if got, _ := nd.leftBy(t, id, pod, key, "", len(nd.tempFiles()), want.Owner); got != want {
		t.Fatalf("%s: completed ADD left %s; want %s", id, got, want)
	}
}

// checkAfterDel: a completed DEL leaves no record, the VF named net1 (for
// host-device) and up with its altname, and an owner index that names no
// record.
func (st *crashStats) checkAfterDel(t *testing.T, nd *node, id string, pod ns.NetNS) {
	t.Helper()
	if left := nd.records(); len(left) != 0 {
		t.Fatalf("%s: records left after DEL: %v", id, left)
	}
	if vf := nd.podVF(t, pod); vf.Name != "net1" || !vf.Up || !vf.Alt {
		t.Fatalf("%s: after DEL the VF is %+v; host-device looks for net1", id, vf)
	}
	if name, ok := parseOwnerLine(nd.ownerIndex(t)); ok {
		if _, err := os.Stat(filepath.Join(nd.stateDir, "attachments", name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: after DEL the owner index names %s, which exists (err %v)", id, name, err)
		}
	}
	st.delChecks++
}

// leftBy reads what a kill left: the VF in the pod, this attachment's
// record, the owner index and the temp files added to the temps there
// were. The index is judged as want first (before is the index before
// ADD), as the other kinds only when it is not that. desc says what was
// seen, for the figures.
func (nd *node) leftBy(t *testing.T, id string, pod ns.NetNS, key state.Key, before string, temps int, want owner) (left, string) {
	t.Helper()
	vf := nd.podVF(t, pod)
	if !vf.Up || !vf.Alt {
		// Every point is outside the down-rename-up of a rename, and no
		// step removes an altname it did not add.
		t.Fatalf("%s: VF left %+v, want it up with its altname", id, vf)
	}
	recs, err := nd.store().List()
	if err != nil {
		t.Fatalf("%s: half-written or unreadable record: %v", id, err)
	}
	var l left
	l.VF = vf.Name
	switch {
	case len(recs) > 1:
		t.Fatalf("%s: %d records for one attachment", id, len(recs))
	case len(recs) == 1:
		r := recs[0]
		if r.Key() != key || r.PCI != testutil.VFAddr(0) || r.Netns != pod.Path() || r.MAC == "" || r.AltName != nd.vfs[0].AltName {
			t.Fatalf("%s: record does not describe the attachment: %+v", id, r)
		}
		l.Record = true
	}
	line := nd.ownerIndex(t)
	name, named := parseOwnerLine(line)
	is := map[owner]bool{
		ownerThis:     named && name == filepath.Base(nd.store().Path(key)),
		ownerFree:     line == "free",
		ownerAsBefore: line == before,
	}
	switch {
	case is[want]:
		l.Owner = want
	case is[ownerThis]:
		l.Owner = ownerThis
	case is[ownerFree]:
		l.Owner = ownerFree
	case is[ownerAsBefore]:
		l.Owner = ownerAsBefore
	default:
		t.Fatalf("%s: owner index %q: neither this attachment's, free nor as before ADD (%q)", id, line, before)
	}
	l.Temps = len(nd.tempFiles()) - temps

	rec, idx := "no record", "owner index "+line
	if l.Record {
		rec = "record whole"
	}
	switch {
	case is[ownerThis]:
		idx = "owner: this attachment"
	case line == "free":
		idx = "owner: free"
	case named:
		idx = "owner: a gone attachment's record" // a lost DEL's; checkAfterDel shows it is gone
	}
	return l, fmt.Sprintf("VF %s, %s, %s, %d temp", l.VF, rec, idx, l.Temps)
}

func (l left) String() string {
	return fmt.Sprintf("%+v", struct {
		VF     string
		Record bool
		Owner  string
		Temps  int
	}{l.VF, l.Record, [...]string{"as before ADD", "this attachment", "free"}[l.Owner], l.Temps})
}

// ownerIndex is the owner line of VF 0's lock file, without its padding;
// "" when there is none.
func (nd *node) ownerIndex(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.stateDir, "locks", testutil.VFAddr(0)+".lock"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return strings.TrimRight(string(line), " ")
}

// parseOwnerLine returns the record file an owner line names.
func parseOwnerLine(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "owner" {
		return "", false
	}
	return f[1], true
}

// runToKill runs the plugin to its end and reports whether SIGKILL ended it.
func (n *node) runToKill(t *testing.T, inv invocation) (bool, outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, out, errb := n.cmd(ctx, inv)
	err := c.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s hung", inv.Command)
	}
	o := outcome{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, o
		}
		o.Exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", inv.Command, err)
	}
	if err := panicIn(o.Stderr); err != nil {
		t.Fatal(err)
	}
	return false, o
}

// vfView is the stand-in as seen in the pod.
type vfView struct {
	Name    string
	Up, Alt bool // up; holds the stand-in's altname
}

// podVF finds the pod's one non-loopback link.
func (nd *node) podVF(t *testing.T, pod ns.NetNS) vfView {
	t.Helper()
	var views []vfView
	for _, l := range linkStates(t, pod) {
		if l.Name != "lo" {
			views = append(views, vfView{l.Name, l.Up, slices.Contains(strings.Split(l.AltNames, ","), nd.vfs[0].AltName)})
		}
	}
	if len(views) != 1 {
		t.Fatalf("pod holds %+v, want exactly the VF", views)
	}
	return views[0]
}

// crashBins is a bin dir like bins whose sriov-stable-cni is built with
// the crashpoints tag; the other plugins are bins'.
func crashBins(t *testing.T, bins string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(bins)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ours {
			if err := os.Symlink(filepath.Join(bins, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	buildCrashPlugin(t, filepath.Join(dir, ours))
	return dir
}

// buildCrashPlugin builds the plugin with the crashpoints tag into out.
func buildCrashPlugin(t *testing.T, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "crashpoints", "-o", out,
		"github.com/sriov-stable-cni/sriov-stable-cni/cmd/sriov-stable-cni")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin with -tags crashpoints: %v\n%s", err, b)
	}
}

// TestCrashPointsOnlyInTestBuild: the plugin binary under test (make
// build's, or harness.Bins' plain build) was built without the crashpoints
// tag and holds neither the crash points' variable nor their names; the
// binary the crash test builds holds both, so the check can tell.
func TestCrashPointsOnlyInTestBuild(t *testing.T) {
	crash := filepath.Join(t.TempDir(), ours)
	buildCrashPlugin(t, crash)
	for _, c := range []struct {
		path string
		want bool
	}{{filepath.Join(harness.Bins(t), ours), false}, {crash, true}} {
		info, err := exec.Command("go", "version", "-m", c.path).CombinedOutput()
		if err != nil {
			t.Fatalf("go version -m %s: %v\n%s", c.path, err, info)
		}
		tagged := slices.ContainsFunc(strings.Split(string(info), "\n"), func(l string) bool {
			k, v, _ := strings.Cut(strings.TrimSpace(l), "\t")
			tags, ok := strings.CutPrefix(v, "-tags=")
			return k == "build" && ok && slices.Contains(strings.Split(tags, ","), "crashpoints")
		})
		bin, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		for what, has := range map[string]bool{
			"built with -tags crashpoints":               tagged,
			"holds " + crashpoint.Env:                    bytes.Contains(bin, []byte(crashpoint.Env)),
			"holds " + string(crashpoint.UndoOwnerFreed): bytes.Contains(bin, []byte(crashpoint.UndoOwnerFreed)),
		} {
			if has != c.want {
				t.Errorf("%s: %s is %v, want %v", c.path, what, has, c.want)
			}
		}
	}
}
