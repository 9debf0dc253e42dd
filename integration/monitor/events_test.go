package monitor_test

import (
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func repairs(kind string) string { return promtext.Series("sriov_stable_repairs_total", "kind", kind) }

// wantSockets waits until the agent holds one netlink socket per
// attachment whose netns exists, and its gauge says so. The port watcher's
// socket, in the agent's own netns, is not one of them.
func (a *agent) wantSockets(what string, want int) {
	a.t.Helper()
	a.waitFor(what, func(m metrics) bool {
		n, err := testutil.NetlinkSocketsElsewhere(a.pid)
		return err == nil && n == want && m["sriov_stable_event_subscriptions"] == float64(want)
	})
}

// The agent sees a change in a pod at once, not at the next sweep (the
// interval is an hour): with --repair=altname,name and NET_ADMIN it renames
// a VF back and re-adds its altname; an RDMA port going down (sysfs) is
// seen within the poll interval. It holds one netlink socket per
// attachment and closes it when DEL removes the record.
func TestMonitorEventsAndRepairs(t *testing.T) {
	n := newNode(t, 3)
	for i := range 3 {
		n.attach(i)
	}
	a := startAgentWith(t, n, []string{"sys_admin", "net_admin"},
		"--interval", "1h", "--poll-interval", "200ms", "--repair", "altname,name")
	a.waitFor("3 healthy attachments", func(m metrics) bool { return m[attachments("ok")] == 3 })
	a.wantSockets("a socket per attachment", 3)

	start := time.Now()
	testutil.RenameIn(t, n.pods[0], "net1", "eth9")
	a.waitFor("the rename repaired", func(m metrics) bool {
		return m[repairs("name")] == 1 && m[drift("renamed")] == 0 && testutil.LinkIn(t, n.pods[0], "net1") != nil
	})
	t.Logf("rename in the pod repaired after %s", time.Since(start).Round(time.Millisecond))

	alt := n.vfs[2].AltName
	start = time.Now()
	err := n.pods[2].Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName("net1")
		if err != nil {
			return err
		}
		return netlink.LinkDelAltName(l, alt)
	})
	if err != nil {
		t.Fatal(err)
	}
	a.waitFor("the altname back", func(m metrics) bool {
		l := testutil.LinkIn(t, n.pods[2], "net1")
		return m[repairs("altname")] == 1 && l != nil && slices.Contains(l.Attrs().AltNames, alt)
	})
	t.Logf("altname removed in the pod, added back after %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	n.sys.SetPort(testutil.VFAddr(rdmaVF), "mlx5_11", 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	a.waitFor("the RDMA port down", func(m metrics) bool { return m[drift("port-down")] == 1 })
	t.Logf("RDMA port down seen after %s", time.Since(start).Round(time.Millisecond))
	n.sys.SetPort(testutil.VFAddr(rdmaVF), "mlx5_11", 1, sysfstest.Port{})
	a.waitFor("the RDMA port up", func(m metrics) bool { return m[drift("port-down")] == 0 })

	if m := a.scrape(); m[sweeps] != 1 {
		t.Errorf("%v sweeps with an hour's interval: the changes were seen by a sweep, not by events", m[sweeps])
	}
	for _, line := range [][]string{{`msg="drift repaired"`, "kind=name"}, {`msg="drift repaired"`, "kind=altname"}} {
		if c := a.logs.Lines(line...); c != 1 {
			t.Errorf("%d log lines %v, want 1", c, line)
		}
	}

	if err := n.chains[1].Del(n.rts[1]); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	a.wantSockets("the deleted attachment's socket closed", 2)
}
