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

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// hostLinks lists the host stand-in's links as name → altnames.
func hostLinks(t *testing.T, host ns.NetNS) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := host.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
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

// With --repair=host, free VFs that came home with a pod's name or
// altnames get their host name back (from a .link file, else from the
// PCI address) and lose the stale altnames, once they have looked so for
// a whole sweep; a VF a live record claims and a VF named well are left
// alone.
func TestHostCleanup(t *testing.T) {
	requireRoot(t)
	sys := sysfstest.New(t)
	sys.AddPF(testPF, 8, sysfstest.Device{})
	names := []string{"net1", "dev7", "net2", "ibp24s0f0v3"}
	for i, name := range names {
		sys.AddVF(testPF, i, vfAddr(i), sysfstest.Device{NetDev: name})
	}
	stable := func(i int) string { return "vf-" + config.PCIToName(vfAddr(i)) }
	host := harness.NewNetns(t)
	err := host.Do(func(ns.NetNS) error {
		for i, name := range names {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: fmt.Sprintf("peer%d", i)}); err != nil {
				return err
			}
		}
		for name, alts := range map[string][]string{"net1": {stable(0), "rail0"}, "ibp24s0f0v3": {stable(3)}} {
			l, err := netlink.LinkByName(name)
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
	link := fmt.Sprintf("[Match]\nPath=pci-%s\n\n[Link]\nName=ib0v0\nAlternativeName=%s\n", vfAddr(0), stable(0))
	if err := os.WriteFile(filepath.Join(linkDir, "10-sriov-stable-vf.link"), []byte(link), 0o644); err != nil {
		t.Fatal(err)
	}
	heard := &recorder{}
	f := newFixture(t, Config{SysfsRoot: sys.Root, Repairs: Repairs{Host: true}, HostNetns: host.Path(), LinkDir: linkDir, Notifiers: []Notifier{heard}})
	live := harness.NewNetns(t)
	for _, r := range []*state.Record{
		{Network: "rail", ContainerID: "gone", IfName: "net1", Netns: filepath.Join(t.TempDir(), "gone"), PCI: vfAddr(0), AltName: "rail0"},
		{Network: "rail", ContainerID: "live", IfName: "net1", Netns: live.Path(), PCI: vfAddr(2), AltName: stable(2)},
	} {
		r.Created = time.Now()
		if err := f.store.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	before := hostLinks(t, host)

	f.mon.Sweep(t.Context())
	if diff := cmp.Diff(before, hostLinks(t, host)); diff != "" {
		t.Errorf("the first sweep changed host links (it must wait a sweep):\n%s", diff)
	}
	f.mon.Sweep(t.Context())
	want := map[string][]string{
		"ib0v0":                       {stable(0)},
		vfnet.FallbackName(vfAddr(1)): {},
		"net2":                        {},
		"ibp24s0f0v3":                 {stable(3)},
		"peer0":                       {}, "peer1": {}, "peer2": {}, "peer3": {},
	}
	got := hostLinks(t, host)
	for k, v := range got {
		if v == nil {
			got[k] = []string{}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("host links after the second sweep (-want +got):\n%s\nlog:\n%s", diff, f.logs)
	}
	f.wantValue(t, 3, "sriov_stable_repairs_total", "kind", RepairHost)
	heardRepairs := heard.repairs()
	sort.Strings(heardRepairs)
	wantHeard := []string{
		vfAddr(0) + " host: removed altname rail0 from net1",
		vfAddr(0) + " host: renamed net1 to ib0v0, from the .link file 10-sriov-stable-vf.link",
		vfAddr(1) + " host: renamed dev7 to " + vfnet.FallbackName(vfAddr(1)) + ", from the PCI address",
	}
	if diff := cmp.Diff(wantHeard, heardRepairs); diff != "" {
		t.Errorf("notifiers heard (-want +got):\n%s", diff)
	}
	f.mon.Sweep(t.Context())
	if c := f.logs.count(`msg="free VF repaired on the host"`); c != 3 {
		t.Errorf("%d host repairs logged, want 3:\n%s", c, f.logs)
	}
	if strings.Contains(f.logs.String(), "not repaired") {
		t.Errorf("a host repair was refused:\n%s", f.logs)
	}
}
