package monitor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

func TestParseRepairs(t *testing.T) {
	for in, want := range map[string]Repairs{
		"": {}, "none": {}, "altname": {AltName: true}, "name,altname": {AltName: true, Name: true},
		"altname,name,host": {AltName: true, Name: true, Host: true},
	} {
		got, err := ParseRepairs(in)
		if err != nil || got != want {
			t.Errorf("ParseRepairs(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, _ := ParseRepairs(got.String()); back != got {
			t.Errorf("%q does not read back as %+v", got.String(), got)
		}
	}
	for _, bad := range []string{"mac", "name,", "all"} {
		if _, err := ParseRepairs(bad); err == nil || !strings.Contains(err.Error(), "altname, name, host") {
			t.Errorf("ParseRepairs(%q) = %v, want an error listing the kinds", bad, err)
		}
	}
}

func (n *node) repairs(kind string) float64 {
	v, _ := n.f.value(n.t, "sriov_stable_repairs_total", "kind", kind)
	return v
}

func (n *node) refused(kind, reason string) float64 {
	v, _ := n.f.value(n.t, "sriov_stable_repairs_refused_total", "kind", kind, "reason", reason)
	return v
}

// With --repair=altname,name, a VF renamed in its pod is renamed back and
// a lost altname is added again, each once, logged, counted and told to
// the notifiers; a changed MTU is reported and left alone.
func TestRepairNameAndAltName(t *testing.T) {
	heard := &recorder{}
	n := newNode(t, Config{Repairs: Repairs{AltName: true, Name: true}, Notifiers: []Notifier{heard}}, 3)
	n.run()
	renamed, stripped, mtu := n.pods[0], n.pods[1], n.pods[2]

	renamed.in(t, "net1", rename("eth9"))
	n.waitFor("the VF named net1 again", 5*time.Second, func() bool {
		return renamed.link(t, "net1") != nil && n.repairs(RepairName) >= 1 && n.driftOf(drift.Renamed) == 0
	})
	if c := n.repairs(RepairName); c != 1 {
		t.Errorf("%v name repairs, want 1:\n%s", c, n.f.logs)
	}
	if l := renamed.link(t, "net1"); l.Attrs().Flags&1 == 0 {
		t.Errorf("the VF is down after its rename back: %s", testutil.Describe(l))
	}
	stripped.in(t, "net1", func(l netlink.Link) error { return netlink.LinkDelAltName(l, stripped.rec.AltName) })
	n.waitFor("the altname back", 5*time.Second, func() bool {
		l := stripped.link(t, "net1")
		return l != nil && slices.Contains(l.Attrs().AltNames, stripped.rec.AltName) && n.repairs(RepairAltName) == 1
	})
	mtu.in(t, "net1", func(l netlink.Link) error { return netlink.LinkSetMTU(l, 1280) })
	n.waitFor("the MTU drift", 5*time.Second, func() bool { return n.driftOf(drift.MTU) == 1 })
	time.Sleep(300 * time.Millisecond) // three polls: nothing may touch it
	if l := mtu.link(t, "net1"); l.Attrs().MTU != 1280 {
		t.Errorf("the MTU was changed back to %d: the monitor must never change it", l.Attrs().MTU)
	}

	want := []string{"pod-00 name: renamed eth9 back to net1", "pod-01 altname: added altname " + stripped.rec.AltName + " to net1 again"}
	got := heard.repairs()
	for i := range got {
		got[i], _, _ = strings.Cut(got[i], " (down for")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("notifiers heard (-want +got):\n%s", diff)
	}
	for _, line := range []string{`msg="drift repaired" network=ib-a containerID=pod-00`, `kind=name`, `kind=altname`} {
		if n.f.logs.Count(line) != 1 {
			t.Errorf("log has %d lines with %q, want 1:\n%s", n.f.logs.Count(line), line, n.f.logs)
		}
	}
	for _, r := range []drift.Reason{drift.Renamed, drift.AltNameMissing} {
		for _, msg := range []string{"drift detected", "drift recovered"} {
			if c := n.f.logs.Lines(`msg="`+msg+`"`, "reason="+string(r)); c != 1 {
				t.Errorf("%q logged %d times for %s, want once:\n%s", msg, c, r, n.f.logs)
			}
		}
	}
	n.f.wantValue(t, 0, "sriov_stable_repairs_total", "kind", RepairHost)
}

// A late agent never touches a VF another attachment now owns: the VF's
// lock names another record as its owner (the device plugin gave it to
// another pod), so the renamed VF is left as it is and that is logged once.
func TestRepairRefusedWhenAnotherRecordOwnsTheVF(t *testing.T) {
	n := newNode(t, Config{Repairs: Repairs{Name: true}}, 2)
	n.run()
	old := n.pods[0]
	other := *old.rec
	other.ContainerID, other.Netns, other.PodUID = "new-owner", n.pods[1].pod.Path(), "uid-new"
	n.record(&other)

	old.in(t, "net1", rename("eth9"))
	n.waitFor("the refusal counted", 5*time.Second, func() bool { return n.refused(RepairName, status.RefusedNotOwner) >= 1 })
	old.in(t, "eth9", func(l netlink.Link) error { return netlink.LinkSetMTU(l, 1400) }) // another check
	n.waitFor("the MTU drift", 5*time.Second, func() bool { return n.driftOf(drift.MTU) >= 1 })
	if l := old.link(t, "eth9"); l == nil {
		t.Fatalf("the VF was renamed although attachment new-owner claims it; pod holds %v", testutil.LinksIn(t, old.pod))
	}
	if n.repairs(RepairName) != 0 {
		t.Errorf("%v name repairs counted, want 0", n.repairs(RepairName))
	}
	if c := n.f.logs.Count(`msg="drift not repaired"`); c != 1 || n.f.logs.Count("claimed by another attachment: ib-a/new-owner/net1") != 1 {
		t.Errorf("the refusal logged %d times (want once, naming new-owner):\n%s", c, n.f.logs)
	}
}

// repairPod itself refuses when the record's netns no longer holds the VF
// (it moved to another pod since the check) or the netns path now names
// another namespace, and leaves the VF wherever it is as it is.
func TestRepairRefusedWhenTheNetnsNoLongerHoldsTheVF(t *testing.T) {
	n := newNode(t, Config{Repairs: Repairs{Name: true, AltName: true}}, 1)
	p := n.pods[0]
	n.f.mon.Sweep(t.Context())
	p.in(t, "net1", rename("eth9"))
	exp := drift.FromRecord(p.rec)
	seen, err := drift.Observe(exp, n.f.mon.sys)
	if err != nil || !seen.Found || seen.Name != "eth9" {
		t.Fatalf("observe: %+v, %v", seen, err)
	}

	// The netns path now names another namespace.
	elsewhere := *seen
	elsewhere.Netns = vfnet.NetnsID{Dev: seen.Netns.Dev, Ino: seen.Netns.Ino + 1}
	results, after := n.f.mon.repairPod(p.rec, exp, &elsewhere, []string{RepairName})
	if len(results) != 1 || results[0].refused != status.RefusedNotOwner || !strings.Contains(results[0].detail, "where the drift was seen") || after != nil {
		t.Errorf("repair in a replaced netns = %+v, %v; want refused not-owner", results, after)
	}

	// The VF moved to another pod.
	next := testutil.NewNetns(t)
	p.in(t, "eth9", func(l netlink.Link) error { return netlink.LinkSetNsFd(l, int(next.Fd())) })
	results, _ = n.f.mon.repairPod(p.rec, exp, seen, []string{RepairAltName, RepairName})
	if len(results) != 2 || results[0].refused != status.RefusedNotOwner || !strings.Contains(results[0].detail, "no longer in netns") {
		t.Errorf("repair of a VF gone from its netns = %+v; want both refused not-owner", results)
	}
	if l := testutil.LinkIn(t, next, "eth9"); l == nil || slices.Contains(l.Attrs().AltNames, "net1") {
		t.Errorf("the VF in the other pod was touched: %s (links %v)", testutil.Describe(l), testutil.LinksIn(t, next))
	}
}

// The record must be on disk as it was checked: a record replaced or
// deleted since is not acted on.
func TestRepairRefusedWhenTheRecordChanged(t *testing.T) {
	n := newNode(t, Config{Repairs: Repairs{Name: true}}, 1)
	p := n.pods[0]
	lock, err := n.f.store.LockVF(p.rec.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if why := n.f.mon.stillOwner(lock, p.rec); why != "" {
		t.Errorf("the owner's own record: %q, want no objection", why)
	}
	lock.Unlock()
	changed := *p.rec
	changed.PodUID = "uid-of-a-new-pod"
	if err := n.f.store.Save(&changed); err != nil {
		t.Fatal(err)
	}
	lock, _ = n.f.store.LockVF(p.rec.PCI)
	if why := n.f.mon.stillOwner(lock, p.rec); !strings.Contains(why, "changed since it was checked") {
		t.Errorf("a record saved again with another pod UID: %q, want it refused", why)
	}
	lock.Unlock()
	if err := n.f.store.Delete(p.rec.Key()); err != nil {
		t.Fatal(err)
	}
	lock, _ = n.f.store.LockVF(p.rec.PCI)
	defer lock.Unlock()
	if why := n.f.mon.stillOwner(lock, p.rec); !strings.Contains(why, "record is gone") {
		t.Errorf("a deleted record: %q, want it refused", why)
	}
}

// A name another link holds is not taken from it: the rename back is
// refused and logged once.
func TestRepairRefusedWhenTheNameIsTaken(t *testing.T) {
	n := newNode(t, Config{Repairs: Repairs{Name: true}}, 1)
	p := n.pods[0]
	p.in(t, "net1", rename("eth9"))
	err := p.pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "net1"}, PeerName: "squat1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	n.start()
	n.waitFor("the refusal", 5*time.Second, func() bool { return n.refused(RepairName, status.RefusedNameTaken) >= 1 })
	if p.link(t, "eth9") == nil {
		t.Errorf("the VF was renamed although net1 is taken: %v", testutil.LinksIn(t, p.pod))
	}
}

// A drift that comes back right after its repair waits out the backoff,
// then is repaired again without any further event.
func TestRepairBackoff(t *testing.T) {
	const backoff = 400 * time.Millisecond
	n := newNode(t, Config{Repairs: Repairs{Name: true}, RepairBackoff: backoff}, 1)
	n.run()
	p := n.pods[0]
	p.in(t, "net1", rename("eth9"))
	n.waitFor("the first repair", 5*time.Second, func() bool { return n.repairs(RepairName) == 1 && p.link(t, "net1") != nil })
	first := time.Now()
	p.in(t, "net1", rename("eth9"))
	n.waitFor("the second repair", 5*time.Second, func() bool { return n.repairs(RepairName) == 2 && p.link(t, "net1") != nil })
	if took := time.Since(first); took < backoff*3/4 {
		t.Errorf("repaired again %s after the first repair, want after the %s backoff", took, backoff)
	}
	n.f.wantValue(t, 1, "sriov_stable_sweeps_total")
}

// bindNetns bind-mounts the netns file of n at a new path, as a runtime's
// netns path is a bind mount: a path that names the same namespace.
func bindNetns(t *testing.T, n ns.NetNS) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(n.Path(), path, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s at %s: %v", n.Path(), path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	return path
}

// A record whose netns is the host's is never repaired, however its path
// names it: here a bind mount of the test's host stand-in, which the
// monitor knows as --host-netns, or as its own netns. A VF renamed and
// stripped of its altname there stays so; each refusal is counted under
// host-netns and logged once.
func TestRepairSkipsTheHostNetns(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hostNetns bool // the host stand-in is --host-netns, else the agent's own
	}{
		{"--host-netns", true},
		{"the agent's own netns", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t)
			host := testutil.NewNetns(t)
			cfg := Config{Repairs: Repairs{AltName: true, Name: true}}
			if tc.hostNetns {
				cfg.HostNetns = host.Path()
			}
			n := newNode(t, cfg, 0)
			if !tc.hostNetns {
				id, err := vfnet.NetnsIDOf(host.Path())
				if err != nil {
					t.Fatal(err)
				}
				n.f.mon.ownNetns = id // as if the agent ran in the stand-in
			}
			p := n.attach(0, host)
			p.rec.Netns = bindNetns(t, host)
			n.record(p.rec)
			n.pods = append(n.pods, p)
			n.run()

			p.in(t, "net1", rename("eth9"))
			n.waitFor("the rename refused", 5*time.Second, func() bool { return n.refused(RepairName, status.RefusedHostNetns) >= 1 })
			p.in(t, "eth9", func(l netlink.Link) error { return netlink.LinkDelAltName(l, p.rec.AltName) })
			n.waitFor("the altname refused", 5*time.Second, func() bool { return n.refused(RepairAltName, status.RefusedHostNetns) >= 1 })
			l := p.link(t, "eth9")
			if l == nil || slices.Contains(l.Attrs().AltNames, p.rec.AltName) {
				t.Errorf("a VF in the host netns was repaired: links %v", testutil.LinksIn(t, host))
			}
			if c := n.repairs(RepairName) + n.repairs(RepairAltName); c != 0 {
				t.Errorf("%v repairs counted in the host netns", c)
			}
			if c := n.f.logs.Lines(`msg="drift not repaired"`, "why=host-netns", "kind=name"); c != 1 {
				t.Errorf("the name refusal logged %d times, want once:\n%s", c, n.f.logs)
			}
		})
	}
}
