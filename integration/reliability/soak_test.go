package reliability_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

var soakVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

func hasCheck(v string) bool { return v != "0.3.0" && v != "0.3.1" }

// fatal carries a harness Fatalf out of a soak worker's goroutine, where
// FailNow is not allowed; the cycle recovers it and counts a failure.
type fatal string

// goTB is a testing.TB for goroutines: Fatalf panics with fatal.
type goTB struct{ testing.TB }

func (g goTB) Fatalf(format string, a ...any) { panic(fatal(fmt.Sprintf(format, a...))) }

// soakStats are the figures of one soak run.
type soakStats struct {
	mu                                      sync.Mutex
	cycles, adds, addFail                   int
	checks, checkFail                       int
	renamedDuring, repaired                 int
	renamedAfter, driftCaught               int
	netnsDeleted, dels, delFail             int
	leftInPod, notHome, recordsLeft, panics int
	addLat, checkLat, delLat                []time.Duration
}

func (s *soakStats) do(f func(s *soakStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// TestSoak runs ADD/CHECK/DEL cycles through libcni, several VFs at once:
// in a third of the cycles the VF is renamed (half of them by a udev-like
// plugin between host-device and us, which ADD must repair; half after
// ADD, which CHECK must report and DEL must undo), and in a tenth the pod
// netns is destroyed before DEL. Every DEL must succeed, and no stand-in,
// record or cached result may be left behind.
func TestSoak(t *testing.T) {
	cycles := envInt(t, "SRIOV_SOAK_CYCLES", 120)
	workers := min(envInt(t, "SRIOV_SOAK_WORKERS", 4), cycles)
	n := newNode(t, workers, true)
	s := &soakStats{}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			nw := *n
			nw.t = goTB{t}
			for i := w; i < cycles; i += workers {
				s.cycle(&nw, w, i)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)

	if left := n.records(); len(left) > 0 {
		t.Errorf("%d records left in the state dir: %v", len(left), left)
	}
	if tmp := n.tempFiles(); len(tmp) > 0 {
		t.Errorf("temp files left in the state dir: %v", tmp)
	}
	cached, _ := filepath.Glob(filepath.Join(n.cacheDir, "results", "*"))
	if len(cached) > 0 {
		t.Errorf("libcni still caches %d results: %v", len(cached), cached)
	}
	for w, vf := range n.vfs {
		if testutil.HostLink(vf.Host) == nil {
			t.Errorf("VF %d's stand-in %s is not in the host netns at the end", w, vf.Host)
		}
	}
	if s.cycles != cycles {
		t.Errorf("ran %d cycles, want %d", s.cycles, cycles)
	}
	for _, bad := range []struct {
		what string
		n    int
	}{{"failed ADDs", s.addFail}, {"failed CHECKs", s.checkFail}, {"failed DELs", s.delFail},
		{"stand-ins left in a pod netns after DEL", s.leftInPod}, {"stand-ins not back on the host", s.notHome},
		{"records left after a cycle", s.recordsLeft}, {"cycles aborted", s.panics},
		{"renames not repaired", s.renamedDuring - s.repaired}} {
		if bad.n != 0 {
			t.Errorf("%s: %d", bad.what, bad.n)
		}
	}
	t.Logf("soak figures (%d cycles, %d VFs at once, %s wall):\n"+
		"  ADD     %5d ok, %d failed   p50 %s  p99 %s  (chain: host-device [+ udev rename] + ours)\n"+
		"  CHECK   %5d ok, %d failed   p50 %s  p99 %s\n"+
		"  rename before our ADD  %d injected, %d repaired\n"+
		"  rename after ADD       %d injected, %d caught by CHECK (code 105, cycles with CHECK)\n"+
		"  netns deleted before DEL %d\n"+
		"  DEL     %5d ok, %d failed   p50 %s  p99 %s\n"+
		"  left behind: %d stand-ins in a pod netns, %d stand-ins off the host, %d records, %d cached results",
		cycles, workers, wall.Round(time.Millisecond),
		s.adds-s.addFail, s.addFail, ms(percentile(s.addLat, 50)), ms(percentile(s.addLat, 99)),
		s.checks-s.checkFail, s.checkFail, ms(percentile(s.checkLat, 50)), ms(percentile(s.checkLat, 99)),
		s.renamedDuring, s.repaired, s.renamedAfter, s.driftCaught, s.netnsDeleted,
		s.dels-s.delFail, s.delFail, ms(percentile(s.delLat, 50)), ms(percentile(s.delLat, 99)),
		s.leftInPod, s.notHome, len(n.records()), len(cached))
}

// cycle runs one ADD/CHECK/DEL cycle on worker w's VF.
func (s *soakStats) cycle(n *node, w, i int) {
	renameDuring, renameAfter, netnsGone := i%6 == 0, i%6 == 3, i%10 == 9
	version := soakVersions[i%len(soakVersions)]
	id := fmt.Sprintf("soak-%04d", i)
	var pod ns.NetNS
	podGone := false
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			s.do(func(s *soakStats) { s.panics++ })
			n.t.Errorf("cycle %d (VF %d, %s): %s\nlog:\n%s", i, w, version, f, n.logTail())
		}
		// A pod of a failed cycle is left to NewNetns's cleanup.
	}()
	s.do(func(s *soakStats) { s.cycles++ })

	pod = testutil.NewNetns(n.t)
	var middle []map[string]any
	if renameDuring {
		middle = append(middle, udev("eth7"))
	}
	host := n.vfs[w].Host
	c := n.chain(version, host, w, nil, middle...)
	r := rt(id, pod)

	t0 := time.Now()
	res, err := c.Add(r)
	lat := time.Since(t0)
	s.do(func(s *soakStats) {
		s.adds++
		s.addLat = append(s.addLat, lat)
		if renameDuring {
			s.renamedDuring++
		}
	})
	if err != nil {
		s.do(func(s *soakStats) { s.addFail++ })
		n.t.Errorf("cycle %d: ADD (%s): %v\nlog:\n%s", i, version, err, n.logTail())
		_ = c.Del(r)
		return
	}
	s.checkAdded(n, w, i, pod, res, renameDuring)

	if renameAfter {
		testutil.RenameIn(n.t, pod, "net1", "eth9")
		s.do(func(s *soakStats) { s.renamedAfter++ })
		if hasCheck(version) {
			// host-device's own CHECK stops at the renamed link; run ours.
			err := c.Only(ours).Check(r)
			if harness.ErrCode(err) == 105 && strings.Contains(fmt.Sprint(err), "renamed: ") {
				s.do(func(s *soakStats) { s.driftCaught++ })
			} else {
				n.t.Errorf("cycle %d: CHECK after rename: %v, want code 105 naming the rename", i, err)
			}
		}
	} else if hasCheck(version) {
		t0 := time.Now()
		err := c.Check(r)
		lat := time.Since(t0)
		s.do(func(s *soakStats) {
			s.checks++
			s.checkLat = append(s.checkLat, lat)
			if err != nil {
				s.checkFail++
			}
		})
		if err != nil {
			n.t.Errorf("cycle %d: CHECK (%s): %v", i, version, err)
		}
	}

	if netnsGone {
		testutil.RemoveNetns(n.t, pod)
		podGone = true
		s.do(func(s *soakStats) { s.netnsDeleted++ })
		// host-device's DEL fails on a missing netns (a runtime retries it
		// or GC gives up on it); ours must succeed and drop the record.
		c = c.Only(ours)
	}
	t0 = time.Now()
	err = c.Del(r)
	lat = time.Since(t0)
	s.do(func(s *soakStats) {
		s.dels++
		s.delLat = append(s.delLat, lat)
		if err != nil {
			s.delFail++
		}
	})
	if err != nil {
		n.t.Errorf("cycle %d: DEL (%s, netns gone %v): %v\nlog:\n%s", i, version, netnsGone, err, n.logTail())
	}
	if netnsGone {
		// The stand-in died with the netns; a real VF would be back on the
		// host (the lab's scenario). Give the worker a new one.
		n.respawn(w)
	} else {
		if got := testutil.LinksIn(n.t, pod); !slices.Equal(got, []string{"lo"}) {
			s.do(func(s *soakStats) { s.leftInPod++ })
			n.t.Errorf("cycle %d: pod netns still holds %v after DEL", i, got)
		}
		if testutil.HostLink(host) == nil {
			s.do(func(s *soakStats) { s.notHome++ })
			n.t.Errorf("cycle %d: stand-in %s is not back on the host", i, host)
		}
	}
	if n.record(id, "net1") != nil {
		s.do(func(s *soakStats) { s.recordsLeft++ })
		n.t.Errorf("cycle %d: record left after DEL", i)
	}
	if !podGone {
		testutil.RemoveNetns(n.t, pod)
		podGone = true
	}
}

// checkAdded verifies what ADD promised: net1 in the pod with the stable
// altname, the result's net1 entry carrying the pod link's MAC, a record.
func (s *soakStats) checkAdded(n *node, w, i int, pod ns.NetNS, res types.Result, renameDuring bool) {
	link := testutil.LinkIn(n.t, pod, "net1")
	if link == nil {
		n.t.Fatalf("after ADD the pod holds %v, no net1", testutil.LinksIn(n.t, pod))
	}
	if !slices.Contains(link.Attrs().AltNames, n.vfs[w].AltName) {
		n.t.Fatalf("after ADD net1 lacks the stable altname: %s", testutil.Describe(link))
	}
	if renameDuring && testutil.LinkIn(n.t, pod, "eth7") == nil {
		s.do(func(s *soakStats) { s.repaired++ })
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		n.t.Fatalf("convert result: %v", err)
	}
	j := slices.IndexFunc(cur.Interfaces, func(i *current.Interface) bool { return i.Name == "net1" && i.Sandbox == pod.Path() })
	if j < 0 || cur.Interfaces[j].Mac != link.Attrs().HardwareAddr.String() {
		n.t.Fatalf("result does not report net1 with the pod link's MAC %s: %s", link.Attrs().HardwareAddr, mustJSON(cur))
	}
	if n.record(fmt.Sprintf("soak-%04d", i), "net1") == nil {
		n.t.Fatalf("no record after ADD")
	}
}
