package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/janitor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// withJanitor is cfg for a monitor beside a host janitor, as the agent
// runs them with --repair=host: the monitor tells the janitor the names
// its attachments carried. The janitor is made once the fixture is
// (newJanitor), and so is called through *jan.
func withJanitor(cfg Config, host ns.NetNS, jan **janitor.Janitor) Config {
	cfg.Repairs.Host, cfg.HostNetns = true, host.Path()
	cfg.Carried = func(pci string, names ...string) { (*jan).Carried(pci, names...) }
	return cfg
}

// newJanitor is the host janitor of f's state dir, cleaning the netns
// host whose VFs sysfsRoot describes, logging to f's log.
func newJanitor(t *testing.T, f *fixture, host ns.NetNS, sysfsRoot string, jc janitor.Config) *janitor.Janitor {
	t.Helper()
	jc.StateDir, jc.SysfsRoot, jc.HostNetns, jc.Logger = f.store.Dir(), sysfsRoot, host.Path(), f.mon.log
	jc.Interval, jc.Timeout = time.Second, 5*time.Second
	j, err := janitor.New(jc)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// hostLinks lists the host stand-in's links as name → altnames.
func hostLinks(t *testing.T, host ns.NetNS) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := host.Do(func(ns.NetNS) error {
		links, err := netlinksafe.LinkList()
		for _, l := range links {
			if l.Type() == "veth" {
				alts := slices.Clone(l.Attrs().AltNames)
				sort.Strings(alts)
				out[l.Attrs().Name] = alts
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// With --repair=host, free VFs that came back from an attachment still
// carrying its pod's name or altnames get their host name back (from a
// .link file, else from the PCI address) and lose those altnames, once
// they have looked so for a whole cleanup interval; the proof is a record
// of the VF whose netns is gone, or an attachment of it the monitor saw
// go (and told the janitor of). A VF
// that was never attached is left alone, though its name is a live pod's
// ifname or looks like a pod's; so are a VF a live record claims and a VF
// named well.
func TestHostCleanup(t *testing.T) {
	requireRoot(t)
	sys := sysfstest.New(t)
	sys.AddPF(testPF, 8, sysfstest.Device{})
	names := []string{
		"net1",        // 0: its record's pod netns is gone; the record says net1, rail0
		"dev7",        // 1: the monitor saw its attachment (net1) go: the kernel named it dev7 on the way home
		"net2",        // 2: a live record claims it
		"ibp24s0f0v3", // 3: named well
		"rail7",       // 4: never attached; the live pod of VF 2 calls its interface rail7
		"net3",        // 5: never attached; only looks like a pod's name
		"rail5",       // 6: the monitor saw its attachment, named rail5 in its pod, go
	}
	for i, name := range names {
		sys.AddVF(testPF, i, testutil.VFAddr(i), sysfstest.Device{NetDev: name})
	}
	stable := func(i int) string { return "vf-" + config.PCIToName(testutil.VFAddr(i)) }
	host := testutil.NewNetns(t)
	err := host.Do(func(ns.NetNS) error {
		for i, name := range names {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: fmt.Sprintf("peer%d", i)}); err != nil {
				return err
			}
		}
		for name, alts := range map[string][]string{"net1": {stable(0), "rail0"}, "ibp24s0f0v3": {stable(3)}, "net3": {"net4"}} {
			l, err := netlinksafe.LinkByName(name)
			if err != nil {
				return err
			}
			for _, a := range alts {
				if err := netlink.LinkAddAltName(l, a); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	linkDir := t.TempDir()
	link := fmt.Sprintf("[Match]\nPath=pci-%s\n\n[Link]\nName=ib0v0\nAlternativeName=%s\n", testutil.VFAddr(0), stable(0))
	if err := os.WriteFile(filepath.Join(linkDir, "10-sriov-stable-vf.link"), []byte(link), 0o644); err != nil {
		t.Fatal(err)
	}
	heard := &recorder{}
	var jan *janitor.Janitor
	f := newFixture(t, withJanitor(Config{SysfsRoot: sys.Root}, host, &jan))
	jan = newJanitor(t, f, host, sys.Root, janitor.Config{LinkDir: linkDir, Notifiers: []janitor.Notifier{heard}})
	sweep := func() {
		f.mon.Sweep(t.Context())
		jan.CleanBounded()
	}
	live := testutil.NewNetns(t)
	gone := filepath.Join(t.TempDir(), "gone")
	seenGo := []*state.Record{
		{Network: "rail", ContainerID: "went1", IfName: "net1", Netns: gone, PCI: testutil.VFAddr(1), AltName: stable(1)},
		{Network: "rail", ContainerID: "went6", IfName: "rail5", Netns: gone, PCI: testutil.VFAddr(6), AltName: stable(6)},
	}
	for _, r := range append([]*state.Record{
		{Network: "rail", ContainerID: "gone", IfName: "net1", Netns: gone, PCI: testutil.VFAddr(0), AltName: "rail0"},
		{Network: "rail", ContainerID: "live", IfName: "rail7", Netns: live.Path(), PCI: testutil.VFAddr(2), AltName: stable(2)},
	}, seenGo...) {
		r.Created = time.Now()
		if err := f.store.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	before := hostLinks(t, host)

	sweep()
	if diff := cmp.Diff(before, hostLinks(t, host)); diff != "" {
		t.Errorf("the first cleanup changed host links (it must wait an interval):\n%s", diff)
	}
	// GC removes the records of VFs 1 and 6: the monitor saw them go.
	for _, r := range seenGo {
		if err := f.store.Delete(r.Key()); err != nil {
			t.Fatal(err)
		}
	}
	sweep()
	want := map[string][]string{
		"ib0v0":                                {stable(0)},
		vfnet.FallbackName(testutil.VFAddr(1)): {},
		"net2":                                 {},
		"ibp24s0f0v3":                          {stable(3)},
		"rail7":                                {},
		"net3":                                 {"net4"},
		vfnet.FallbackName(testutil.VFAddr(6)): {},
	}
	for i := range names {
		want[fmt.Sprintf("peer%d", i)] = []string{}
	}
	got := hostLinks(t, host)
	for k, v := range got {
		if v == nil {
			got[k] = []string{}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("host links after the second cleanup (-want +got):\n%s\nlog:\n%s", diff, f.logs)
	}
	if made := jan.Snapshot().Made[RepairHost]; made != 4 {
		t.Errorf("the janitor counts %d host repairs, want 4", made)
	}
	heardRepairs := heard.repairs()
	sort.Strings(heardRepairs)
	wantHeard := []string{
		testutil.VFAddr(0) + " host: removed altname rail0 from net1",
		testutil.VFAddr(0) + " host: renamed net1 to ib0v0, from the .link file 10-sriov-stable-vf.link",
		testutil.VFAddr(1) + " host: renamed dev7 to " + vfnet.FallbackName(testutil.VFAddr(1)) + ", from the PCI address",
		testutil.VFAddr(6) + " host: renamed rail5 to " + vfnet.FallbackName(testutil.VFAddr(6)) + ", from the PCI address",
	}
	if diff := cmp.Diff(wantHeard, heardRepairs); diff != "" {
		t.Errorf("notifiers heard (-want +got):\n%s", diff)
	}
	sweep()
	if c := f.logs.Count(`msg="free VF repaired on the host"`); c != 4 {
		t.Errorf("%d host repairs logged, want 4:\n%s", c, f.logs)
	}
	if strings.Contains(f.logs.String(), "not repaired") {
		t.Errorf("a host repair was refused:\n%s", f.logs)
	}
}

// A name the monitor saw the VF under in its pod is proof too: a pod that
// renamed its VF to eth9, then went without DEL, sends it home as eth9,
// and host cleanup gives it its host name back.
func TestHostCleanupNameSeenInThePod(t *testing.T) {
	host := testutil.NewNetns(t)
	var jan *janitor.Janitor
	n := newNode(t, withJanitor(Config{}, host, &jan), 1)
	jan = newJanitor(t, n.f, host, n.sys.Root, janitor.Config{})
	n.run()
	p := n.pods[0]
	p.in(t, "net1", rename("eth9"))
	n.waitFor("the rename seen", 5*time.Second, func() bool { return n.driftOf(drift.Renamed) == 1 })

	// The pod's netns goes without DEL: the VF comes home as eth9, and GC
	// removes the record.
	p.in(t, "eth9", func(l netlink.Link) error { return netlink.LinkSetNsFd(l, int(host.Fd())) })
	n.sys.SetNetDev(p.rec.PCI, "eth9")
	if err := n.f.store.Delete(p.rec.Key()); err != nil {
		t.Fatal(err)
	}
	n.waitFor("the record forgotten", 5*time.Second, func() bool {
		_, ok := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "ok")
		_, drifted := n.f.value(t, "sriov_stable_attachments", "network", "ib-a", "status", "drifted")
		return !ok && !drifted
	})
	jan.CleanBounded()
	jan.CleanBounded()
	want := map[string][]string{vfnet.FallbackName(p.rec.PCI): {p.rec.AltName}}
	if diff := cmp.Diff(want, hostLinks(t, host)); diff != "" {
		t.Errorf("host links (-want +got):\n%s\nlog:\n%s", diff, n.f.logs)
	}
}
