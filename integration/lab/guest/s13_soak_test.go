//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// TestLab13RealVFSoak: ADD/CHECK/DEL cycles through libcni on the real VFs
// of the first PF, one worker per VF (-lab.soak-cycles, from
// LAB_SOAK_CYCLES; make lab-soak runs 200). In a third of the cycles the VF
// is renamed: half of them in the pod between host-device and
// sriov-stable-cni (as udev would; ADD must repair it), half after ADD
// (sriov-stable-cni's CHECK must report 105 and the chain's DEL undo it).
// In a tenth the pod netns is deleted before DEL: the VF must come back to
// the root netns, then the chain's DEL with an empty CNI_NETNS (as
// containerd sends it for a closed sandbox) must succeed. At the end: no
// failed DEL, no VF left in a pod netns, no record, no cached result.
func TestLab13RealVFSoak(t *testing.T) {
	e := newEnv(t)
	cycles := *soakCycles
	vfs := theLab.PFs[0].VFs
	workers := min(len(vfs), cycles)
	udev := &udevStandIn{pending: map[string]vf{}}
	e.exec.setBefore(udev.before)
	s := &soakStats{}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < cycles; i += workers {
				s.cycle(e, udev, vfs[w], i)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	e.exec.setBefore(nil)

	recs, err := records(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	cached, _ := filepath.Glob(filepath.Join(e.dir, "cache", "results", "*"))
	for _, v := range vfs {
		if _, err := rootLinkOf(v.PCI); err != nil {
			s.notHome++
			t.Errorf("at the end %s is not in the root netns: %v", v, err)
		}
	}
	t.Logf("soak figures (%d cycles on %d real VFs at once, %s wall, %s per cycle):\n"+
		"  ADD    %4d ok, %d failed  p50 %s  p99 %s  max %s  (host-device [+ rename] + sriov-stable-cni)\n"+
		"  CHECK  %4d ok, %d failed  p50 %s  p99 %s  max %s\n"+
		"  rename before our ADD   %d injected, %d repaired\n"+
		"  rename after ADD        %d injected, %d reported by CHECK (105 renamed)\n"+
		"  netns deleted before DEL %d, VF back in the root netns %d (as %s)\n"+
		"  DEL    %4d ok, %d failed  p50 %s  p99 %s  max %s  (%d with empty CNI_NETNS)\n"+
		"  left behind: %d VFs in a pod netns, %d VFs off the root netns, %d records (%d at the end), %d cached results",
		cycles, workers, wall.Round(time.Millisecond), (wall / time.Duration(max(cycles, 1))).Round(time.Millisecond),
		len(s.add.ok), s.add.failed, s.add.p(50), s.add.p(99), s.add.p(100),
		len(s.check.ok), s.check.failed, s.check.p(50), s.check.p(99), s.check.p(100),
		s.renamedBefore, s.repaired, s.renamedAfter, s.driftReported,
		s.netnsDeleted, s.returned, strings.Join(s.returnedAs, ","),
		len(s.del.ok), s.del.failed, s.del.p(50), s.del.p(99), s.del.p(100), s.emptyNetnsDels,
		s.leftInPod, s.notHome, s.recordsLeft, len(recs), len(cached))

	if s.cycles != cycles {
		t.Errorf("ran %d cycles, want %d", s.cycles, cycles)
	}
	for _, bad := range []struct {
		what string
		n    int
	}{
		{"failed ADDs", s.add.failed}, {"failed CHECKs", s.check.failed}, {"failed DELs", s.del.failed},
		{"renames before ADD not repaired", s.renamedBefore - s.repaired},
		{"renames after ADD not reported by CHECK", s.renamedAfter - s.driftReported},
		{"VFs not back from a deleted netns", s.netnsDeleted - s.returned},
		{"VFs left in a pod netns after DEL", s.leftInPod}, {"VFs off the root netns", s.notHome},
		{"records left after a cycle's DEL", s.recordsLeft}, {"records at the end", len(recs)},
		{"cached results at the end", len(cached)},
	} {
		if bad.n != 0 {
			t.Errorf("%s: %d", bad.what, bad.n)
		}
	}
}

// udevStandIn renames a pod's VF right before sriov-stable-cni's ADD, for
// the pods it was told about, as udev racing the chain would.
type udevStandIn struct {
	mu      sync.Mutex
	pending map[string]vf // container ID → VF to rename
}

func (u *udevStandIn) renameBeforeAdd(containerID string, v vf) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending[containerID] = v
}

func (u *udevStandIn) before(plugin string, env map[string]string) error {
	if plugin != "sriov-stable-cni" || env["CNI_COMMAND"] != "ADD" {
		return nil
	}
	u.mu.Lock()
	v, ok := u.pending[env["CNI_CONTAINERID"]]
	delete(u.pending, env["CNI_CONTAINERID"])
	u.mu.Unlock()
	if !ok {
		return nil
	}
	l, err := linkByParent(env["CNI_NETNS"], v.PCI)
	if err != nil {
		return err
	}
	return renameLink(env["CNI_NETNS"], l, udevName(v.PCI))
}

// latencies collects one verb's successful call times and counts failures.
type latencies struct {
	ok     []time.Duration
	failed int
}

func (l *latencies) note(took time.Duration, err error) {
	if err != nil {
		l.failed++
		return
	}
	l.ok = append(l.ok, took)
}

// p is the q-th percentile of the successful calls, in ms.
func (l *latencies) p(q int) string {
	if len(l.ok) == 0 {
		return "-"
	}
	s := slices.Clone(l.ok)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*q+99)/100-1)
	return fmt.Sprintf("%dms", s[max(i, 0)].Milliseconds())
}

// soakStats are the figures of one soak; every field is guarded by mu.
type soakStats struct {
	mu                          sync.Mutex
	cycles                      int
	add, check, del             latencies
	renamedBefore, repaired     int
	renamedAfter, driftReported int
	netnsDeleted, returned      int
	returnedAs                  []string
	emptyNetnsDels              int
	leftInPod, notHome          int
	recordsLeft                 int
}

func (s *soakStats) do(f func(s *soakStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// cycle runs ADD, CHECK and DEL of VF v for a new pod, with the faults of
// cycle i. It reports failures with Errorf (it runs in a goroutine) and
// counts them; a cycle that fails stops early but always DELs.
func (s *soakStats) cycle(e *env, udev *udevStandIn, v vf, i int) {
	t := e.t
	renameBefore, renameAfter, netnsGone := i%6 == 0, i%6 == 3, i%10 == 9
	s.do(func(s *soakStats) { s.cycles++ })
	p, err := makePod(fmt.Sprintf("soak%03d", i))
	if err != nil {
		s.do(func(s *soakStats) { s.add.failed++ })
		t.Errorf("cycle %d: %v", i, err)
		return
	}
	defer func() {
		if err := p.vanish(); err != nil {
			t.Errorf("cycle %d: remove %s: %v", i, p, err)
		}
		// A VF still in the pod (after a failed DEL) comes back once the
		// kernel has destroyed the netns, which it does asynchronously:
		// wait, so that the next cycle's ADD finds it on the host.
		if err := poll(15*time.Second, func() error { _, err := rootLinkOf(v.PCI); return err }); err != nil {
			t.Errorf("cycle %d: %s is not back in the root netns after its pod was removed: %v", i, v, err)
		}
	}()
	a, err := e.newAttachment(p, v, opts{})
	if err != nil {
		t.Errorf("cycle %d: %v", i, err)
		return
	}

	if renameBefore {
		udev.renameBeforeAdd(p.ID, v)
	}
	start := time.Now()
	r, err := a.add()
	took := time.Since(start)
	if err == nil {
		err = verifyResult(a, r)
	}
	if err == nil {
		err = verifyInPod(a)
	}
	s.do(func(s *soakStats) {
		s.add.note(took, err)
		if renameBefore {
			s.renamedBefore++
			if err == nil {
				s.repaired++
			}
		}
	})
	if err != nil {
		t.Errorf("cycle %d: ADD %s: %v", i, a, err)
		s.delAndCheck(e, a, i, false)
		return
	}

	if renameAfter {
		// A name of this VF's own: VFs that return from destroyed pods under
		// one shared non-pod name race on the host without udev (docs/reliability.md).
		err := renameInPod(a, fmt.Sprintf("rogue%d", v.Index))
		if err == nil {
			err = a.checkOurs()
			if cniCode(err) == 105 && strings.Contains(err.Error(), "renamed") {
				err = nil
			} else {
				err = fmt.Errorf("CHECK of sriov-stable-cni after the rename: %v, want 105 renamed", err)
			}
		}
		s.do(func(s *soakStats) {
			s.renamedAfter++
			if err == nil {
				s.driftReported++
			}
		})
		if err != nil {
			t.Errorf("cycle %d: %s: %v", i, a, err)
		}
	} else {
		start := time.Now()
		err := a.check()
		took := time.Since(start)
		s.do(func(s *soakStats) { s.check.note(took, err) })
		if err != nil {
			t.Errorf("cycle %d: CHECK %s: %v", i, a, err)
		}
	}

	if netnsGone {
		path := p.Path()
		if err := p.vanish(); err != nil {
			t.Errorf("cycle %d: delete the netns of %s: %v", i, a, err)
		}
		var back string
		err := poll(15*time.Second, func() error {
			l, err := rootLinkOf(v.PCI)
			if err == nil {
				back = l.Attrs().Name
			}
			return err
		})
		s.do(func(s *soakStats) {
			s.netnsDeleted++
			if err == nil {
				s.returned++
				s.returnedAs = append(s.returnedAs, back)
			}
		})
		if err != nil {
			t.Errorf("cycle %d: %s did not come back from the deleted netns %s: %v", i, v, path, err)
		}
	}
	s.delAndCheck(e, a, i, netnsGone)
}

// delAndCheck runs the chain's DEL (with an empty CNI_NETNS once the pod's
// netns is gone) and checks that the VF is back in the root netns, the pod
// holds no VF and the attachment's record is gone.
func (s *soakStats) delAndCheck(e *env, a *attachment, i int, netnsGone bool) {
	t := e.t
	start := time.Now()
	err := a.del()
	took := time.Since(start)
	s.do(func(s *soakStats) {
		s.del.note(took, err)
		if netnsGone {
			s.emptyNetnsDels++
		}
	})
	if err != nil {
		t.Errorf("cycle %d: DEL %s (netns gone: %v): %v", i, a, netnsGone, err)
	}
	if !netnsGone {
		if _, err := linkByParent(a.pod.Path(), a.vf.PCI); !errors.Is(err, errNoVF) {
			s.do(func(s *soakStats) { s.leftInPod++ })
			t.Errorf("cycle %d: after DEL %s is still in the pod (%v)", i, a.vf, err)
		} else if _, err := rootLinkOf(a.vf.PCI); err != nil {
			s.do(func(s *soakStats) { s.notHome++ })
			t.Errorf("cycle %d: after DEL %s is not in the root netns: %v", i, a.vf, err)
		}
	}
	key := state.Key{Network: networkName, ContainerID: a.pod.ID, IfName: ifName}
	if _, err := os.Stat(state.NewStore(a.e.stateDir).Path(key)); !errors.Is(err, os.ErrNotExist) {
		s.do(func(s *soakStats) { s.recordsLeft++ })
		t.Errorf("cycle %d: the record of %s is still there after DEL (%v)", i, key, err)
	}
}

// renameInPod renames the attachment's VF inside its pod.
func renameInPod(a *attachment, name string) error {
	l, err := linkByParent(a.pod.Path(), a.vf.PCI)
	if err != nil {
		return err
	}
	return renameLink(a.pod.Path(), l, name)
}
