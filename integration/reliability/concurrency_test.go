package reliability_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

// TestSixtyFourAttachmentsInParallel adds, checks and deletes 64
// attachments at once, each on its own VF, all through libcni.
func TestSixtyFourAttachmentsInParallel(t *testing.T) {
	const n = 64
	nd := newNode(t, n, true)
	chains := make([]*harness.Chain, n)
	rts := make([]*libcni.RuntimeConf, n)
	pods := make([]string, n)
	for i := range n {
		chains[i] = nd.chain("1.1.0", nd.vfs[i].Host, i, nil)
		pod := testutil.NewNetns(t)
		rts[i], pods[i] = rt(fmt.Sprintf("par-%02d", i), pod), pod.Path()
	}
	run := func(verb string, f func(i int) error) time.Duration { return harness.Parallel(t, n, verb, f) }
	add := run("ADD", func(i int) error { _, err := chains[i].Add(rts[i]); return err })
	if t.Failed() {
		t.Logf("log:\n%s", nd.logTail())
	}
	if got := len(nd.records()); got != n {
		t.Errorf("%d records after %d ADDs", got, n)
	}
	for i := range n {
		r := nd.record(rts[i].ContainerID, "net1")
		if r == nil || r.PCI != testutil.VFAddr(i) || r.Netns != pods[i] {
			t.Errorf("attachment %d: record %+v, want VF %s in %s", i, r, testutil.VFAddr(i), pods[i])
		}
	}
	check := run("CHECK", func(i int) error { return chains[i].Check(rts[i]) })
	del := run("DEL", func(i int) error { return chains[i].Del(rts[i]) })
	if left := nd.records(); len(left) != 0 {
		t.Errorf("records left after DEL: %v", left)
	}
	for i, vf := range nd.vfs {
		if testutil.HostLink(vf.Host) == nil {
			t.Errorf("stand-in %d (%s) not back on the host", i, vf.Host)
		}
	}
	t.Logf("%d attachments in parallel: ADD %s, CHECK %s, DEL %s (wall, all %d)", n, ms(add), ms(check), ms(del), n)
}

// TestRaceForOneVFThroughChains: two pods' chains move different
// stand-ins but name the same VF (a device plugin handing out one VF
// twice), through libcni. Exactly one ADD may succeed; the other fails
// cleanly, its DEL leaves the winner alone, and the winner's attachment
// stays intact. The impostor stand-in has no claim to the VF's altname,
// so its ADD fails either way (100 when it locks first, 101 after the
// winner recorded); TestRaceForOneVFSymmetric is where only the ownership
// check can tell the two apart.
func TestRaceForOneVFThroughChains(t *testing.T) {
	const rounds = 8
	nd := newNode(t, 2, false)
	// Stand-in 1 plays the second device the broken allocation hands out
	// under VF 0's address; it has no altname of its own.
	nd.vfs[1] = testutil.NewStandIn(t, nextHostName(), testutil.VFAddr(1), false)
	wins, codes := map[int]int{}, map[uint]int{}
	for round := range rounds {
		chains := []*harness.Chain{nd.chain("1.1.0", nd.vfs[0].Host, 0, nil), nd.chain("1.1.0", nd.vfs[1].Host, 0, nil)}
		rts := make([]*libcni.RuntimeConf, 2)
		for i := range 2 {
			rts[i] = rt(fmt.Sprintf("race-%d-%d", round, i), testutil.NewNetns(t))
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { _, errs[i] = chains[i].Add(rts[i]) })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: want exactly one ADD to succeed, got %v and %v\nlog:\n%s", round, errs[0], errs[1], nd.logTail())
		}
		winner := slices.IndexFunc(errs, func(e error) bool { return e == nil })
		loser := 1 - winner
		wins[winner]++
		code := harness.ErrCode(errs[loser])
		codes[code]++
		if code != 100 && code != 101 {
			t.Fatalf("round %d: losing ADD failed with %v, want code 100 or 101", round, errs[loser])
		}
		if r := nd.record(rts[winner].ContainerID, "net1"); r == nil || r.PCI != testutil.VFAddr(0) {
			t.Fatalf("round %d: winner's record %+v", round, r)
		}
		if got := len(nd.records()); got != 1 {
			t.Fatalf("round %d: %d records for one VF", round, got)
		}
		// The runtime DELs the failed attachment: host-device takes its
		// stand-in home; ours must not touch the winner.
		if err := chains[loser].Del(rts[loser]); err != nil {
			t.Fatalf("round %d: DEL of the loser: %v", round, err)
		}
		if err := chains[winner].Check(rts[winner]); err != nil {
			t.Fatalf("round %d: winner's CHECK after the loser's DEL: %v", round, err)
		}
		if err := chains[winner].Del(rts[winner]); err != nil {
			t.Fatalf("round %d: winner's DEL: %v", round, err)
		}
		for i := range 2 {
			if testutil.HostLink(nd.vfs[i].Host) == nil {
				t.Fatalf("round %d: stand-in %d not back on the host", round, i)
			}
		}
	}
	if left := nd.records(); len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	t.Logf("%d rounds: VF 0's own chain won %d, the impostor's %d; the loser got 100 %d times, 101 %d times",
		rounds, wins[0], wins[1], codes[100], codes[101])
}

// TestRaceForOneVFSymmetric: both pods hold a link that answers to the
// VF's stable altname, so both of our ADDs would find "the VF". The per-VF
// lock and the ownership check against existing records must let exactly
// one win; the other gets 101 naming the owner, and touches nothing.
func TestRaceForOneVFSymmetric(t *testing.T) {
	const rounds = 20
	nd := newNode(t, 2, false)
	var pods []ns.NetNS
	var macs []string
	for i := range 2 {
		p := testutil.NewNetns(t)
		// Both carry VF 0's altname, under a name our ADD must repair (as
		// if udev renamed it after the plugin before us reported net1).
		nd.vfs[i].AltName = nd.vfs[0].AltName
		l := placeInPod(t, nd.vfs[i], p, "eth7", true)
		pods, macs = append(pods, p), append(macs, l.Attrs().HardwareAddr.String())
	}
	wins := map[int]int{}
	for round := range rounds {
		before := [][]linkState{linkStates(t, pods[0]), linkStates(t, pods[1])}
		outs := make([]outcome, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			inv := invocation{Command: "ADD", ContainerID: fmt.Sprintf("sym-%d-%d", round, i), Netns: pods[i].Path(), IfName: "net1",
				Stdin: stdin("1.1.0", nd.ours(0, nil), prevFor(pods[i], "net1", macs[i]))}
			wg.Go(func() { outs[i], errs[i] = nd.execPlugin(inv) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if (outs[0].Exit == 0) == (outs[1].Exit == 0) {
			t.Fatalf("round %d: want exactly one ADD to succeed, got %s and %s", round, outs[0], outs[1])
		}
		winner := slices.IndexFunc(outs, func(o outcome) bool { return o.Exit == 0 })
		loser := 1 - winner
		wins[winner]++
		lo := outs[loser]
		if lo.Err == nil || lo.Err.Code != 101 || !strings.Contains(lo.Err.Msg, "already attached") ||
			!strings.Contains(lo.Err.Msg, fmt.Sprintf("sym-%d-%d", round, winner)) {
			t.Fatalf("round %d: loser got %s, want code 101 naming the owner sym-%d-%d", round, lo, round, winner)
		}
		if got := linkStates(t, pods[loser]); !slices.Equal(got, before[loser]) {
			t.Fatalf("round %d: the losing ADD changed its pod:\nbefore %+v\nafter  %+v", round, before[loser], got)
		}
		if got := len(nd.records()); got != 1 {
			t.Fatalf("round %d: %d records for one VF", round, got)
		}
		// The runtime DELs the failed attachment; it must leave the
		// loser's link as it is too (the record says the VF is elsewhere).
		delLoser := nd.run(invocation{Command: "DEL", ContainerID: fmt.Sprintf("sym-%d-%d", round, loser), Netns: pods[loser].Path(),
			IfName: "net1", Stdin: stdin("1.1.0", nd.ours(0, nil), prevFor(pods[loser], "net1", macs[loser]))})
		if delLoser.Exit != 0 {
			t.Fatalf("round %d: loser's DEL: %s", round, delLoser)
		}
		if got := linkStates(t, pods[loser]); !slices.Equal(got, before[loser]) {
			t.Fatalf("round %d: the loser's DEL changed its pod: %+v", round, got)
		}
		// The winner's DEL gives its link back under CNI_IFNAME; rename it
		// to eth7 again for the next round.
		delWinner := nd.run(invocation{Command: "DEL", ContainerID: fmt.Sprintf("sym-%d-%d", round, winner), Netns: pods[winner].Path(),
			IfName: "net1", Stdin: stdin("1.1.0", nd.ours(0, nil), nil)})
		if delWinner.Exit != 0 {
			t.Fatalf("round %d: winner's DEL: %s", round, delWinner)
		}
		testutil.RenameIn(t, pods[winner], "net1", "eth7")
		if left := nd.records(); len(left) != 0 {
			t.Fatalf("round %d: records left: %v", round, left)
		}
	}
	t.Logf("%d rounds of two ADDs racing for one VF: pod 0 won %d, pod 1 won %d, every loser got 101", rounds, wins[0], wins[1])
}

// TestLateDelLeavesNewOwnerAlone: an old container's DEL arrives after a
// new container got the same VF. Whatever the old DEL says, the VF, its
// name, altnames and the new owner's record must stay as they are.
func TestLateDelLeavesNewOwnerAlone(t *testing.T) {
	type setup struct {
		name string
		// lose ends the old attachment without its DEL; it returns the
		// old pod's netns path for the late DEL.
		lose func(t *testing.T, nd *node, old *harness.Chain, r *libcni.RuntimeConf, pod ns.NetNS)
	}
	for _, tc := range []setup{
		{"old netns destroyed", func(t *testing.T, nd *node, _ *harness.Chain, _ *libcni.RuntimeConf, pod ns.NetNS) {
			testutil.RemoveNetns(t, pod)
			nd.respawn(0)
		}},
		{"old netns alive, VF already taken out", func(t *testing.T, nd *node, old *harness.Chain, r *libcni.RuntimeConf, _ ns.NetNS) {
			// Only the plugin before us ran its DEL (our DEL was lost).
			if err := old.Only("host-device").Del(r); err != nil {
				t.Fatalf("host-device DEL: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := newNode(t, 1, false)
			oldPod := testutil.NewNetns(t)
			old := nd.chain("1.1.0", nd.vfs[0].Host, 0, nil)
			oldRT := rt("old", oldPod)
			if _, err := old.Add(oldRT); err != nil {
				t.Fatalf("old ADD: %v", err)
			}
			tc.lose(t, nd, old, oldRT, oldPod)
			if nd.record("old", "net1") == nil {
				t.Fatalf("setup: the old record should still be there")
			}

			newPod := testutil.NewNetns(t)
			cur := nd.chain("1.1.0", nd.vfs[0].Host, 0, nil)
			newRT := rt("new", newPod)
			if _, err := cur.Add(newRT); err != nil {
				t.Fatalf("new ADD of the VF whose old record is stale: %v\nlog:\n%s", err, nd.logTail())
			}
			if nd.record("old", "net1") != nil {
				t.Errorf("the stale record of the old container survived the new ADD")
			}
			links, rec := linkStates(t, newPod), nd.record("new", "net1")

			lateDels := map[string]func() error{
				// What the runtime sends: the old attachment as cached.
				"libcni DEL of the old attachment": func() error { return old.Only(ours).Del(oldRT) },
				// A late DEL naming the netns where the VF is now, under
				// another ifname (a reused netns path): without the record
				// check it would rename the new owner's net1 to net0.
				"DEL naming the new owner's netns": func() error {
					o := nd.run(invocation{Command: "DEL", ContainerID: "old", Netns: newPod.Path(), IfName: "net0",
						Stdin: stdin("1.1.0", nd.ours(0, nil), prevFor(newPod, "net0", ""))})
					if o.Exit != 0 {
						return fmt.Errorf("%s", o)
					}
					return nil
				},
			}
			for what, del := range lateDels {
				if err := del(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got := linkStates(t, newPod); !slices.Equal(got, links) {
					t.Fatalf("%s changed the new owner's pod:\nbefore %+v\nafter  %+v", what, links, got)
				}
				if got := nd.record("new", "net1"); got == nil || mustJSON(got) != mustJSON(rec) {
					t.Fatalf("%s changed the new owner's record: %+v", what, got)
				}
			}
			if err := cur.Check(newRT); err != nil {
				t.Fatalf("new owner's CHECK after the late DELs: %v", err)
			}
			if err := cur.Del(newRT); err != nil {
				t.Fatalf("new owner's DEL: %v", err)
			}
			if testutil.HostLink(nd.vfs[0].Host) == nil {
				t.Fatalf("stand-in not back on the host")
			}
			if left := nd.records(); len(left) != 0 {
				t.Fatalf("records left: %v", left)
			}
		})
	}
}
