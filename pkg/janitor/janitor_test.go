package janitor

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// The janitor alone, in a private netns standing in for the host's, over
// a fixture sysfs whose VFs' netdevs are veths of that netns: a name
// proven by Carried (no record at all) is given back only at the second
// cleanup that sees it alike; a VF whose host name another link holds is
// refused (name-taken), counted once per cleanup and logged once; a VF a
// live record claims is left alone though Carried proves its name.
func TestCleanRepairsAndRefuses(t *testing.T) {
	testutil.RequireRoot(t, "makes a network namespace and veths standing in for VFs")
	const pf = "0000:18:00.0"
	vf := func(i int) string { return testutil.VFAddr(i) }
	sys := sysfstest.New(t)
	sys.AddPF(pf, 8, sysfstest.Device{})
	names := []string{"rail5", "rail6", "rail7"}
	for i, n := range names {
		sys.AddVF(pf, i, vf(i), sysfstest.Device{NetDev: n})
	}
	host := testutil.NewNetns(t)
	err := host.Do(func(ns.NetNS) error {
		// VF 1's host name is held by a link of its own.
		for i, n := range append(slices.Clone(names), vfnet.FallbackName(vf(1))) {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n}, PeerName: fmt.Sprintf("peer%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	live := testutil.NewNetns(t)
	if err := state.NewStore(stateDir).Save(&state.Record{Network: "rail", ContainerID: "live", IfName: "rail7",
		Netns: live.Path(), PCI: vf(2), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.LogBuffer{}
	j, err := New(Config{StateDir: stateDir, SysfsRoot: sys.Root, HostNetns: host.Path(),
		Interval: time.Second, Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		j.Carried(vf(i), n)
	}
	hostNames := func() []string {
		var out []string
		if err := host.Do(func(ns.NetNS) error {
			links, err := netlinksafe.LinkList()
			for _, l := range links {
				if !strings.HasPrefix(l.Attrs().Name, "peer") && l.Type() == "veth" {
					out = append(out, l.Attrs().Name)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	before := hostNames()
	j.CleanBounded()
	if got := hostNames(); !slices.Equal(got, before) {
		t.Fatalf("the first cleanup renamed %v → %v; it must wait an interval", before, got)
	}
	j.CleanBounded()
	j.CleanBounded()
	want := []string{vfnet.FallbackName(vf(0)), vfnet.FallbackName(vf(1)), "rail6", "rail7"}
	slices.Sort(want)
	if got := hostNames(); !slices.Equal(got, want) {
		t.Errorf("host links after three cleanups: %v, want %v\n%s", got, want, logs)
	}
	snap := j.Snapshot()
	if snap.Made[status.RepairHost] != 1 || snap.Refused[status.KindReason{Kind: status.RepairHost, Reason: status.RefusedNameTaken}] != 2 {
		t.Errorf("repairs %+v: want 1 made (VF 0), 2 refused name-taken (VF 1, at the second and third cleanups)", snap)
	}
	if n := logs.Lines("free VF not repaired on the host", "why=name-taken", vf(1)); n != 1 {
		t.Errorf("the refusal of VF 1 logged %d times, want once:\n%s", n, logs)
	}
	if s := j.Stuck(time.Now()); s != nil {
		t.Errorf("Stuck after cleanups that ended: %v", s)
	}
}
