package plugin_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// plainFile is a path of a regular file, where a netns path is expected.
func plainFile(f *fixture) string { return filepath.Join(filepath.Dir(f.logFile), "plain-file") }

// portDown is an InfiniBand port that lost the fabric.
var portDown = sysfstest.Port{State: "1: DOWN", PhysState: "2: Polling"}

// TestAdd calls ADD in-process in a real pod netns, with a veth standing in
// for the VF and a DGX H200 fixture sysfs. A failed ADD must leave the pod
// netns (names, altnames, state of every link) and the records as it found
// them.
func TestAdd(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	const ctr = "ctr-new"
	devInfo := filepath.Join(t.TempDir(), "devinfo.json")
	type addCase struct {
		name string
		// podName is the VF's name in the pod when ADD runs; "" leaves it
		// on the host.
		podName string
		setup   func(t *testing.T, f *fixture)
		extra   map[string]any // merged into the configuration
		noPrev  bool
		// cniVersion of the configuration and prevResult; "" is 1.0.0.
		cniVersion string
		args       func(f *fixture, a *skel.CmdArgs)
		code       uint                                                // 0 = ADD succeeds
		within     time.Duration                                       // ADD must return within this; 0 = no bound
		msg        func(f *fixture) []string                           // what the error message must name
		check      func(t *testing.T, f *fixture, res *current.Result) // more checks after a success
	}
	vfAndNetns := func(more ...string) func(f *fixture) []string {
		return func(f *fixture) []string { return append([]string{f.vf.PCI, f.pod.Path()}, more...) }
	}
	cases := []addCase{
		{name: "VF as host-device left it", podName: "net1", check: func(t *testing.T, f *fixture, res *current.Result) {
			vf := link(t, f.pod, "net1")
			idx := 0
			want := &current.Result{
				CNIVersion: current.ImplementedSpecVersion, // as converted from the printed 1.0.0

				Interfaces: []*current.Interface{{Name: "net1", Mac: vf.MAC, Mtu: 1500, Sandbox: f.pod.Path(), PciID: f.vf.PCI}},
				IPs: []*current.IPConfig{{Interface: &idx, Address: net.IPNet{
					IP: net.IPv4(192, 168, 7, 3).To4(), Mask: net.CIDRMask(24, 32)}}},
			}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			wantRec := &state.Record{
				Version: state.RecordVersion, Network: network, ContainerID: ctr, IfName: "net1", Netns: f.pod.Path(),
				PCI: f.vf.PCI, PF: f.sys.PFs[0].PCI, VFIndex: f.vf.Index, AltName: f.standIn.AltName, FoundAs: "net1",
				MAC: vf.MAC, MTU: 1500, LinkLayer: "infiniband", NodeGUID: f.vf.NodeGUID, RDMA: []string{f.vf.RDMA}, RDMASource: "host-sysfs",
				PortPolicy: "require", GUIDPolicy: "require", SysfsRoot: f.sys.Root,
			}
			if diff := cmp.Diff(wantRec, f.record(t, key(ctr, "net1")), cmpopts.IgnoreFields(state.Record{}, "Created")); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
		}},
		{name: "cniVersion 0.4.0", podName: "ib0", cniVersion: "0.4.0", check: func(t *testing.T, f *fixture, res *current.Result) {
			// 0.4.0 has no mtu or pciID; the rest is corrected.
			want := []*current.Interface{{Name: "net1", Mac: link(t, f.pod, "net1").MAC, Sandbox: f.pod.Path()}}
			if diff := cmp.Diff(want, res.Interfaces); diff != "" {
				t.Errorf("result interfaces (-want +got):\n%s", diff)
			}
		}},
		{name: "device info file completed for network-status", podName: "net1",
			extra: map[string]any{"runtimeConfig": map[string]any{"CNIDeviceInfoFile": devInfo}},
			setup: func(t *testing.T, f *fixture) {
				in := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"` + f.vf.PCI + `"}}`
				if err := os.WriteFile(devInfo, []byte(in), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				var got struct {
					PCI map[string]string `json:"pci"`
				}
				data, err := os.ReadFile(devInfo)
				if err == nil {
					err = json.Unmarshal(data, &got)
				}
				want := map[string]string{"pci-address": f.vf.PCI, "rdma-device": f.vf.RDMA, "pf-pci-address": f.sys.PFs[0].PCI}
				if diff := cmp.Diff(want, got.PCI); err != nil || diff != "" {
					t.Errorf("device info after ADD (-want +got, %v):\n%s", err, diff)
				}
			}},
		{name: "pod identity from CNI_ARGS", podName: "net1",
			args: func(_ *fixture, a *skel.CmdArgs) {
				a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=train;K8S_POD_NAME=worker-3;K8S_POD_INFRA_CONTAINER_ID=ctr-new;K8S_POD_UID=0f1e2d3c"
			},
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				r := f.record(t, key(ctr, "net1"))
				if got := [3]string{r.PodNamespace, r.PodName, r.PodUID}; got != [3]string{"train", "worker-3", "0f1e2d3c"} {
					t.Errorf("record's pod = %q, want train/worker-3 uid 0f1e2d3c", got)
				}
			}},
		{name: "unreadable CNI_ARGS cost the attachment nothing", podName: "net1",
			args: func(_ *fixture, a *skel.CmdArgs) { a.Args = "K8S_POD_NAMESPACE=train;garbage;K8S_POD_NAME=x" },
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				if r := f.record(t, key(ctr, "net1")); r.PodNamespace != "train" {
					t.Errorf("record's pod namespace = %q, want what was read before the bad pair (train)", r.PodNamespace)
				}
			}},
		{name: "VF renamed by udev before us", podName: "ib0", check: func(t *testing.T, f *fixture, res *current.Result) {
			if l := link(t, f.pod, "ib0"); l != nil {
				t.Errorf("the VF is still named ib0: %+v", l)
			}
			if r := f.record(t, key(ctr, "net1")); r.FoundAs != "ib0" {
				t.Errorf("record says the VF was found as %q, want ib0", r.FoundAs)
			}
			if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "net1" {
				t.Errorf("result interfaces = %+v, want net1 alone", res.Interfaces)
			}
		}},
		{name: "CNI_IFNAME held by another link", podName: "ib0",
			setup: func(t *testing.T, f *fixture) { addVeth(t, f.pod, "net1") },
			code:  plugin.ErrConflict, msg: vfAndNetns("named ib0, but net1 is held by another link")},
		{name: "VF not in the pod netns", code: plugin.ErrVFNotFound, msg: vfAndNetns("not found in netns", "lo")},
		{name: "VF not in sysfs", podName: "ib0", extra: map[string]any{"deviceID": "0000:18:07.7"},
			code: plugin.ErrVFNotFound, msg: func(*fixture) []string { return []string{"0000:18:07.7", "no such PCI device"} }},
		{name: "pod netns gone", podName: "ib0",
			args: func(f *fixture, a *skel.CmdArgs) { a.Netns = filepath.Join(f.stateDir, "no-such-netns") },
			code: types.ErrInvalidEnvironmentVariables, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, filepath.Join(f.stateDir, "no-such-netns"), "does not exist"}
			}},
		{name: "pod netns path not a netns", podName: "ib0",
			setup: func(t *testing.T, f *fixture) {
				if err := os.WriteFile(plainFile(f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			args: func(f *fixture, a *skel.CmdArgs) { a.Netns = plainFile(f) },
			code: types.ErrInvalidEnvironmentVariables, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, plainFile(f), "is not a network namespace"}
			}},
		{name: "zero GUID", podName: "ib0", setup: func(t *testing.T, f *fixture) { f.setNodeGUID("0000:0000:0000:0000") },
			code: plugin.ErrBadGUID, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, f.pod.Path(), f.vf.RDMA + " node GUID is 0000:0000:0000:0000", "hostconfig"}
			}},
		{name: "all-F GUID", podName: "ib0", setup: func(t *testing.T, f *fixture) { f.setNodeGUID("ffff:ffff:ffff:ffff") },
			code: plugin.ErrBadGUID, msg: vfAndNetns("node GUID is ffff:ffff:ffff:ffff")},
		{name: "duplicate GUID", podName: "ib0",
			setup: func(t *testing.T, f *fixture) { f.setNodeGUID(f.sys.PFs[1].VFs[0].NodeGUID) },
			code:  plugin.ErrBadGUID, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, f.pod.Path(), "is also held by " + f.sys.PFs[1].VFs[0].PCI}
			}},
		// Exclusive mode: another attached VF's device sits in its pod's
		// netns, out of the host's GUID index; its owner index says its GUID.
		{name: "duplicate GUID of a VF whose device is in its pod (exclusive mode)", podName: "net1",
			setup: func(t *testing.T, f *fixture) {
				f.exclusiveMode(t)
				other, _ := f.attachOther(t, f.sys.PFs[1].VFs[0], "ctr-other")
				f.sys.HideRDMA(other.PCI, other.RDMA) // rdma-cni moved it into that pod
				f.setNodeGUID(other.NodeGUID)
			},
			code: plugin.ErrBadGUID, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, f.pod.Path(), "node GUID " + f.sys.PFs[1].VFs[0].NodeGUID + " is also held by VF " +
					f.sys.PFs[1].VFs[0].PCI + ", attached to container ctr-other in netns "}
			}},
		{name: "GUID of a VF whose pod is gone is no duplicate (exclusive mode)", podName: "net1",
			setup: func(t *testing.T, f *fixture) {
				f.exclusiveMode(t)
				other, pod := f.attachOther(t, f.sys.PFs[1].VFs[0], "ctr-other")
				f.sys.HideRDMA(other.PCI, other.RDMA)
				f.setNodeGUID(other.NodeGUID)
				testutil.RemoveNetns(t, pod) // that pod is gone, its record not yet
			}},
		{name: "duplicate GUID under guidPolicy=warn", podName: "net1", extra: map[string]any{"guidPolicy": "warn"},
			setup: func(t *testing.T, f *fixture) { f.setNodeGUID(f.sys.PFs[1].VFs[0].NodeGUID) },
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				f.wantOneWarning(t, "GUID problem, continuing under guidPolicy=warn", "is also held by "+f.sys.PFs[1].VFs[0].PCI)
			}},
		// RDMA netns exclusive mode: the device moved into the pod netns, so
		// the host's sysfs shows the VF's infiniband/ empty. Here the pod
		// netns holds no device either: found nowhere, never skipped.
		{name: "RDMA device found nowhere (exclusive-mode host view)", podName: "net1",
			setup: func(t *testing.T, f *fixture) { f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA) },
			code:  plugin.ErrBadGUID, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, f.pod.Path(), "no RDMA device of it found",
					"its PF " + f.sys.PFs[0].PCI + " has RDMA device " + f.sys.PFs[0].RDMA,
					"host sysfs " + filepath.Join(f.sys.Root, "bus/pci/devices", f.vf.PCI, "infiniband") + ": empty",
					"RDMA netlink: not asked, ib_core is not loaded",
					"sysfs of netns " + f.pod.Path() + " at bus/pci/devices/" + f.vf.PCI + "/infiniband: empty"}
			}},
		{name: "RDMA device found nowhere under guidPolicy=warn", podName: "net1",
			extra: map[string]any{"guidPolicy": "warn", "linkLayer": "auto"},
			setup: func(t *testing.T, f *fixture) { f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA) },
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				warns := f.logLines(t, "level=WARN")
				if len(warns) != 1 || !strings.Contains(warns[0], "no RDMA device found") || !strings.Contains(warns[0], f.vf.PCI) ||
					!strings.Contains(warns[0], "netns="+f.pod.Path()) {
					t.Errorf("want one warning naming the VF and the netns, got %d: %q", len(warns), warns)
				}
				if r := f.record(t, key(ctr, "net1")); len(r.RDMA) != 0 || r.NodeGUID != "" {
					t.Errorf("record holds RDMA %v, GUID %q; want none", r.RDMA, r.NodeGUID)
				}
			}},
		{name: "RDMA device found nowhere under guidPolicy=ignore", podName: "net1",
			extra: map[string]any{"guidPolicy": "ignore", "linkLayer": "auto"},
			setup: func(t *testing.T, f *fixture) { f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA) },
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				if warns := f.logLines(t, "level=WARN"); len(warns) != 0 {
					t.Errorf("want no warning, got %q", warns)
				}
			}},
		{name: "netdev VF: no RDMA device and nothing asks for one", podName: "net1", extra: map[string]any{"linkLayer": "auto"},
			setup: func(t *testing.T, f *fixture) {
				f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA)
				f.hidePFRDMA(t)
			},
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				if warns := f.logLines(t, "level=WARN"); len(warns) != 0 {
					t.Errorf("want no warning, got %q", warns)
				}
			}},
		{name: "VF without RDMA device where InfiniBand is configured", podName: "net1",
			setup: func(t *testing.T, f *fixture) {
				f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA)
				f.hidePFRDMA(t)
			},
			code: plugin.ErrBadGUID, msg: vfAndNetns("the configuration asks for linkLayer infiniband")},
		{name: "port down", podName: "ib0", extra: map[string]any{"portWaitMs": 50},
			setup: func(t *testing.T, f *fixture) { f.setPort(portDown) },
			code:  plugin.ErrPortDown, msg: vfAndNetns("port 1 is 1: DOWN / 2: Polling", "after waiting 50ms")},
		{name: "port down under portPolicy=warn", podName: "net1", extra: map[string]any{"portWaitMs": 50, "portPolicy": "warn"},
			setup: func(t *testing.T, f *fixture) { f.setPort(portDown) },
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				f.wantOneWarning(t, "port not up, continuing under portPolicy=warn", "port 1 is 1: DOWN / 2: Polling")
			}},
		// ignore does not wait: portWaitMs would cost this ADD 10 s.
		{name: "port down under portPolicy=ignore", podName: "net1", extra: map[string]any{"portWaitMs": 10000, "portPolicy": "ignore"},
			setup: func(t *testing.T, f *fixture) { f.setPort(portDown) }, within: 2 * time.Second,
			check: func(t *testing.T, f *fixture, _ *current.Result) {
				if warns := f.logLines(t, "level=WARN"); len(warns) != 0 {
					t.Errorf("portPolicy=ignore logged %q", warns)
				}
			}},
		{name: "port comes up while ADD waits", podName: "ib0", extra: map[string]any{"portWaitMs": 5000},
			setup: func(t *testing.T, f *fixture) { f.setPort(portDown); f.portUpAfter(t, 100*time.Millisecond) }},
		{name: "Ethernet port where InfiniBand is configured", podName: "ib0",
			setup: func(t *testing.T, f *fixture) { f.setPort(sysfstest.Port{LinkLayer: "Ethernet"}) },
			code:  plugin.ErrMismatch, msg: vfAndNetns("link layer is ethernet, expected infiniband")},
		{name: "MTU mismatch", podName: "ib0", extra: map[string]any{"mtu": 4092},
			code: plugin.ErrMismatch, msg: vfAndNetns("MTU is 1500, expected 4092")},
		{name: "CNI_IFNAME not an interface name", podName: "ib0",
			args: func(_ *fixture, a *skel.CmdArgs) { a.IfName = "net/1" },
			code: types.ErrInvalidEnvironmentVariables, msg: func(*fixture) []string { return []string{"CNI_IFNAME"} }},
		{name: "CNI_IFNAME longer than IFNAMSIZ", podName: "ib0",
			args: func(_ *fixture, a *skel.CmdArgs) { a.IfName = "net1234567890abc" },
			code: types.ErrInvalidEnvironmentVariables, msg: func(*fixture) []string { return []string{"CNI_IFNAME"} }},
		{name: "container ID with a path in it", podName: "ib0",
			args: func(_ *fixture, a *skel.CmdArgs) { a.ContainerID = "../../etc" },
			code: types.ErrInvalidEnvironmentVariables, msg: func(*fixture) []string { return []string{"CNI_CONTAINERID", "'..'"} }},
		{name: "empty container ID", podName: "ib0",
			args: func(_ *fixture, a *skel.CmdArgs) { a.ContainerID = "" },
			code: types.ErrInvalidEnvironmentVariables, msg: func(*fixture) []string { return []string{"CNI_CONTAINERID", "empty"} }},
		{name: "no prevResult", podName: "ib0", noPrev: true,
			code: types.ErrInvalidNetworkConfig, msg: func(*fixture) []string { return []string{"must be chained", "no prevResult", network} }},
		{name: "VF held by a live attachment", podName: "",
			setup: func(t *testing.T, f *fixture) {
				old := testutil.NewNetns(t)
				f.moveIn(t, old, "net1")
				if _, err := f.add(t, args("ctr-old", old, "net1", stdin(t, f.conf(nil), hostDeviceResult(old, "net1")))); err != nil {
					t.Fatalf("ADD of the live attachment: %v", err)
				}
			},
			code: plugin.ErrConflict, msg: func(f *fixture) []string {
				return []string{f.vf.PCI, "already attached to container ctr-old", "refusing to attach it to container " + ctr}
			}},
		{name: "stale record of the VF, old netns still there",
			setup: func(t *testing.T, f *fixture) { f.loseAttachment(t, false) },
			check: func(t *testing.T, f *fixture, _ *current.Result) { f.wantOnlyRecord(t, key(ctr, "net1")) }},
		{name: "stale record of the VF, old netns gone",
			setup: func(t *testing.T, f *fixture) { f.loseAttachment(t, true) },
			check: func(t *testing.T, f *fixture, _ *current.Result) { f.wantOnlyRecord(t, key(ctr, "net1")) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, node)
			if tc.podName != "" {
				f.moveIn(t, f.pod, tc.podName)
			}
			if tc.setup != nil {
				tc.setup(t, f)
			}
			extra := tc.extra
			var prev types.Result
			if !tc.noPrev {
				prev = hostDeviceResult(f.pod, "net1")
			}
			if tc.cniVersion != "" {
				extra = testutil.Merge(map[string]any{"cniVersion": tc.cniVersion}, extra)
				var err error
				if prev, err = prev.GetAsVersion(tc.cniVersion); err != nil {
					t.Fatal(err)
				}
			}
			a := args(ctr, f.pod, "net1", stdin(t, f.conf(extra), prev))
			if tc.args != nil {
				tc.args(f, a)
			}
			podBefore, recsBefore := links(t, f.pod), f.records(t)

			start := time.Now()
			res, err := f.add(t, a)
			if took := time.Since(start); tc.within > 0 && took > tc.within {
				t.Errorf("ADD took %s, want within %s", took, tc.within)
			}

			if got := cniCode(t, err); got != tc.code {
				t.Fatalf("ADD: code %d (%v), want %d", got, err, tc.code)
			}
			if tc.code != 0 {
				for _, s := range tc.msg(f) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("ADD error does not say %q: %v", s, err)
					}
				}
				if diff := cmp.Diff(podBefore, links(t, f.pod)); diff != "" {
					t.Errorf("failed ADD changed the pod netns (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(recsBefore, f.records(t)); diff != "" {
					t.Errorf("failed ADD changed the records (-before +after):\n%s", diff)
				}
				return
			}
			vf := link(t, f.pod, "net1")
			if vf == nil || !slices.Contains(vf.AltNames, f.standIn.AltName) {
				t.Fatalf("after ADD the pod holds %+v, want net1 with altname %s", links(t, f.pod), f.standIn.AltName)
			}
			if r := f.record(t, key(ctr, "net1")); r == nil || r.PCI != f.vf.PCI || r.Netns != f.pod.Path() {
				t.Errorf("record after ADD = %+v, want one for VF %s in %s", r, f.vf.PCI, f.pod.Path())
			}
			if n := len(f.claims(t, key("someone-else", "net1"))); n != 1 {
				t.Errorf("the VF has %d claims after ADD, want 1 (this attachment)", n)
			}
			if tc.check != nil {
				tc.check(t, f, res)
			}
		})
	}
}

// TestCheck calls CHECK after a successful ADD, with what the runtime
// passes: the ADD's result as prevResult. Every drift is one line of a 105
// error, named by its reason.
func TestCheck(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	cases := []struct {
		name    string
		drift   func(t *testing.T, f *fixture)
		extra   map[string]any
		noPrev  bool
		code    uint
		reasons []string // the reasons of a 105, in order
		msg     func(f *fixture) []string
		warn    []string // CHECK passes with one warning saying these
	}{
		{name: "clean"},
		{name: "renamed", drift: func(t *testing.T, f *fixture) { renameUp(t, f.pod, "net1", "eth3") },
			code: plugin.ErrDrift, reasons: []string{"renamed"},
			msg: func(f *fixture) []string { return []string{"VF " + f.vf.PCI + " is named eth3, expected net1"} }},
		{name: "altname removed", drift: func(t *testing.T, f *fixture) {
			// A veth has no PCI parent: without its altname nothing says it
			// is the VF, so CHECK reports it missing (with a PCI parent it
			// would be found and reported altname-missing).
			withLink(t, f.pod, "net1", func(l netlink.Link) error { return netlink.LinkDelAltName(l, f.standIn.AltName) })
		}, code: plugin.ErrDrift, reasons: []string{"missing"},
			msg: func(f *fixture) []string {
				return []string{"VF " + f.vf.PCI + " is not in netns " + f.pod.Path(), "net1"}
			}},
		{name: "every drift at once", drift: func(t *testing.T, f *fixture) {
			renameUp(t, f.pod, "net1", "eth3")
			withLink(t, f.pod, "eth3", func(l netlink.Link) error {
				if err := netlink.LinkSetMTU(l, 4000); err != nil {
					return err
				}
				return netlink.LinkSetHardwareAddr(l, net.HardwareAddr{0x02, 0, 0, 0, 0xbe, 0xef})
			})
			f.setNodeGUID("a288:c2ff:fe18:ffff")
			f.setPort(sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", LinkLayer: "Ethernet"})
		}, code: plugin.ErrDrift, reasons: []string{"renamed", "mac", "guid", "mtu", "link-layer", "port-down"},
			msg: func(f *fixture) []string {
				return []string{"MAC is 02:00:00:00:be:ef", "node GUID is a288:c2ff:fe18:ffff, expected " + f.vf.NodeGUID,
					"MTU is 4000, expected 1500", "link layer is ethernet, expected infiniband", "port 1 is 1: DOWN / 3: Disabled"}
			}},
		// Without its RDMA port the link layer is the netdev's: the
		// stand-in veth's Ethernet (a real VF's IPoIB netdev says InfiniBand).
		{name: "RDMA device gone from every view", drift: func(t *testing.T, f *fixture) { f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA) },
			code: plugin.ErrDrift, reasons: []string{"rdma-missing", "link-layer"},
			msg: func(f *fixture) []string {
				return []string{"VF " + f.vf.PCI + ": its RDMA device is found nowhere",
					"host sysfs " + filepath.Join(f.sys.Root, "bus/pci/devices", f.vf.PCI, "infiniband") + ": empty",
					"sysfs of netns " + f.pod.Path() + " at bus/pci/devices/" + f.vf.PCI + "/infiniband: empty"}
			}},
		{name: "RDMA device gone under guidPolicy=ignore", drift: func(t *testing.T, f *fixture) { f.sys.HideRDMA(f.vf.PCI, f.vf.RDMA) },
			extra: map[string]any{"guidPolicy": "ignore"}, code: plugin.ErrDrift, reasons: []string{"link-layer"},
			msg: func(f *fixture) []string { return []string{"link layer is ethernet"} }},
		{name: "port down under portPolicy=warn", drift: func(t *testing.T, f *fixture) { f.setPort(portDown) },
			extra: map[string]any{"portPolicy": "warn"},
			warn:  []string{"portPolicy warn", "reason=port-down", "port 1 is 1: DOWN / 2: Polling"}},
		{name: "record missing", drift: func(t *testing.T, f *fixture) {
			if err := f.store.Delete(key("ctr", "net1")); err != nil {
				t.Fatal(err)
			}
		}, code: plugin.ErrDrift, reasons: []string{"record-missing"},
			msg: func(f *fixture) []string { return []string{"no ADD record for " + network + "/ctr/net1"} }},
		{name: "pod netns gone", drift: func(t *testing.T, f *fixture) { testutil.RemoveNetns(t, f.pod) },
			code: types.ErrInvalidEnvironmentVariables,
			msg:  func(f *fixture) []string { return []string{f.vf.PCI, f.pod.Path(), "does not exist"} }},
		{name: "no prevResult", noPrev: true, code: types.ErrInvalidNetworkConfig,
			msg: func(*fixture) []string { return []string{"needs the prevResult of ADD"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, node)
			a, res := f.attach(t, "ctr")
			if tc.drift != nil {
				tc.drift(t, f)
			}
			var prev types.Result = res
			if tc.noPrev {
				prev = nil
			}
			err := f.check(t, f.withPrev(t, a, prev, tc.extra))
			if got := cniCode(t, err); got != tc.code {
				t.Fatalf("CHECK: code %d (%v), want %d", got, err, tc.code)
			}
			if tc.code == 0 {
				if tc.warn != nil {
					f.wantOneWarning(t, tc.warn...)
				}
				return
			}
			if tc.code == plugin.ErrDrift {
				if diff := cmp.Diff(tc.reasons, driftReasons(err)); diff != "" {
					t.Errorf("CHECK reasons (-want +got):\n%s\n%v", diff, err)
				}
			}
			for _, s := range tc.msg(f) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("CHECK error does not say %q: %v", s, err)
				}
			}
		})
	}
}

// driftReasons are the reasons of a 105 error, one per line after the first.
func driftReasons(err error) []string {
	var out []string
	lines := strings.Split(err.(*types.Error).Msg, "\n")
	for _, l := range lines[1:] {
		reason, _, _ := strings.Cut(l, ":")
		out = append(out, reason)
	}
	return out
}

// TestDel calls DEL after a successful ADD (unless a case undoes it). DEL
// always succeeds when it can; it hands the VF back named CNI_IFNAME,
// removes an altname only when ADD added it, and removes the record.
func TestDel(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	cases := []struct {
		name   string
		before func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs // changes the node, returns DEL's args
		// want returns the pod's links after DEL, given them right after
		// ADD and right before DEL.
		want       func(f *fixture, added, beforeDel []linkState) []linkState
		keepRecord bool // the attachment's record survives (it is another's)
		twice      bool
	}{
		{name: "renamed after ADD: renamed back", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			renameUp(t, f.pod, "net1", "eth3")
			return a
		}, want: asAdded},
		{name: "altname ADD added is removed", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			// A VF found by its PCI parent gets the altname from ADD, which
			// says so in the record; a veth is only found by the altname,
			// so the record is written as ADD writes it for such a VF.
			r := f.record(t, key("ctr", "net1"))
			r.AddedAltName = true
			if err := f.store.Save(r); err != nil {
				t.Fatal(err)
			}
			renameUp(t, f.pod, "net1", "eth3")
			return a
		}, want: func(f *fixture, added, _ []linkState) []linkState {
			return withVF(added, "net1", func(l *linkState) { l.AltNames = remove(l.AltNames, f.standIn.AltName) })
		}},
		{name: "repeated", twice: true, before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			renameUp(t, f.pod, "net1", "eth3")
			return a
		}, want: asAdded},
		{name: "pod netns gone", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			testutil.RemoveNetns(t, f.pod)
			return a
		}},
		{name: "no record and no prevResult: deviceID is enough", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			if err := f.store.Delete(key("ctr", "net1")); err != nil {
				t.Fatal(err)
			}
			renameUp(t, f.pod, "net1", "eth3")
			return f.withPrev(t, a, nil, nil)
		}, want: asAdded},
		{name: "no record, no prevResult, no deviceID: nothing to do", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			if err := f.store.Delete(key("ctr", "net1")); err != nil {
				t.Fatal(err)
			}
			renameUp(t, f.pod, "net1", "eth3")
			return f.withPrev(t, a, nil, map[string]any{"deviceID": nil})
		}, want: asBefore},
		{name: "CNI_IFNAME held by another link: VF left under its name", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			renameUp(t, f.pod, "net1", "eth3")
			addVeth(t, f.pod, "net1")
			return a
		}, want: asBefore},
		{name: "VF now owned by another attachment: left alone", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			// The old attachment's DEL was lost; the VF went to a new one,
			// in this netns under net2. A late DEL of the old one names
			// this netns: without the ownership check it would rename the
			// new owner's net2 to net1.
			if err := f.store.Delete(key("ctr", "net1")); err != nil {
				t.Fatal(err)
			}
			renameUp(t, f.pod, "net1", "net2")
			b := args("ctr-new", f.pod, "net2", stdin(t, f.conf(nil), hostDeviceResult(f.pod, "net2")))
			if _, err := f.add(t, b); err != nil {
				t.Fatalf("ADD of the new owner: %v", err)
			}
			return a
		}, want: asBefore, keepRecord: true},
		{name: "transient host name in the alias: a name of its own", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			// The VF came back from a dead pod as net7 and was handed on:
			// host-device saved net7 as its host name.
			withLink(t, f.pod, "net1", func(l netlink.Link) error { return netlink.LinkSetAlias(l, "net7") })
			return a
		}, want: func(f *fixture, added, _ []linkState) []linkState {
			return withVF(added, "net1", func(l *linkState) { l.Alias = "vf18s00f5" })
		}},
		{name: "host name taken on the host: a name of its own", before: func(t *testing.T, f *fixture, a *skel.CmdArgs) *skel.CmdArgs {
			f.inHost(t, func() {
				if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: f.vf.NetDev}, PeerName: "other"}); err != nil {
					t.Fatal(err)
				}
			})
			return a
		}, want: func(f *fixture, added, _ []linkState) []linkState {
			return withVF(added, "net1", func(l *linkState) { l.Alias = "vf18s00f5" })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, node)
			a, _ := f.attach(t, "ctr")
			added := links(t, f.pod)
			if tc.before != nil {
				a = tc.before(t, f, a)
			}
			gone := tc.want == nil
			var beforeDel []linkState
			if !gone {
				beforeDel = links(t, f.pod)
			}
			recsBefore := f.records(t)

			err := f.del(t, a)
			if err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if tc.twice {
				if err := f.del(t, a); err != nil {
					t.Fatalf("second DEL: %v", err)
				}
			}

			if !gone {
				if diff := cmp.Diff(tc.want(f, added, beforeDel), links(t, f.pod), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("pod netns after DEL (-want +got):\n%s", diff)
				}
			}
			if tc.keepRecord {
				if diff := cmp.Diff(recsBefore, f.records(t)); diff != "" {
					t.Errorf("DEL changed another attachment's record (-before +after):\n%s", diff)
				}
				return
			}
			if r := f.record(t, key("ctr", "net1")); r != nil {
				t.Errorf("record survived DEL: %+v", r)
			}
			if c := f.claims(t, key("someone-else", "net1")); len(c) != 0 {
				t.Errorf("VF still claimed after DEL: %+v", c)
			}
		})
	}
}

// asAdded: DEL returns the pod to how ADD left it.
func asAdded(_ *fixture, added, _ []linkState) []linkState { return added }

// asBefore: DEL leaves the pod as it was.
func asBefore(_ *fixture, _, beforeDel []linkState) []linkState { return beforeDel }

// withVF is ls with the link named name changed by fn.
func withVF(ls []linkState, name string, fn func(*linkState)) []linkState {
	out := make([]linkState, len(ls))
	copy(out, ls)
	for i := range out {
		if out[i].Name == name {
			out[i].AltNames = append([]string(nil), out[i].AltNames...)
			fn(&out[i])
		}
	}
	return out
}

func remove(s []string, v string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return x == v })
}

// loseAttachment attaches the VF to an old container in another pod and
// then loses that attachment without its DEL: the VF moves on to this
// test's pod as net1 (the kernel returned it and host-device handed it
// on); with netnsGone the old pod's netns is destroyed too.
func (f *fixture) loseAttachment(t *testing.T, netnsGone bool) {
	t.Helper()
	old := testutil.NewNetns(t)
	f.moveIn(t, old, "net1")
	if _, err := f.add(t, args("ctr-old", old, "net1", stdin(t, f.conf(nil), hostDeviceResult(old, "net1")))); err != nil {
		t.Fatalf("ADD of the old attachment: %v", err)
	}
	moveBetween(t, old, f.pod, "net1", "net1")
	if netnsGone {
		testutil.RemoveNetns(t, old)
	}
	if f.record(t, key("ctr-old", "net1")) == nil {
		t.Fatal("setup: the old attachment has no record")
	}
}

// wantOnlyRecord checks that k's is the only record left.
func (f *fixture) wantOnlyRecord(t *testing.T, k state.Key) {
	t.Helper()
	var keys []state.Key
	for _, r := range f.records(t) {
		keys = append(keys, r.Key())
	}
	if diff := cmp.Diff([]state.Key{k}, keys); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// portUpAfter brings the VF's port up after d, each file replaced whole
// by a rename so a read never sees it half written.
func (f *fixture) portUpAfter(t *testing.T, d time.Duration) {
	dir := filepath.Join(f.sys.RDMAPath(f.vf.PCI, f.vf.RDMA), "ports", "1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		for name, value := range map[string]string{"state": "4: ACTIVE", "phys_state": "5: LinkUp"} {
			tmp := filepath.Join(dir, "."+name)
			if err := os.WriteFile(tmp, []byte(value+"\n"), 0o644); err != nil {
				t.Error(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
				t.Error(err)
			}
		}
	}()
	t.Cleanup(func() { <-done })
}

// TestGC removes this network's records of attachments the runtime no
// longer lists, and nothing else. It needs no namespace.
func TestGC(t *testing.T) {
	sys := sysfstest.New(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	store := state.NewStore(stateDir)
	live, gone, other := key("ctr-live", "net1"), key("ctr-gone", "net1"), state.Key{Network: "other-net", ContainerID: "ctr-gone", IfName: "net1"}
	for i, k := range []state.Key{live, gone, other} {
		r := &state.Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName, Netns: "/var/run/netns/gone",
			PCI: fmt.Sprintf("0000:18:00.%d", i+2), Created: time.Now().UTC()}
		if err := store.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	conf := stdin(t, map[string]any{"cniVersion": "1.1.0", "name": network, "type": plugin.Name,
		"sysfsRoot": sys.Root, "stateDir": stateDir, "logFile": filepath.Join(t.TempDir(), "plugin.log"),
		"cni.dev/valid-attachments": []map[string]string{{"containerID": live.ContainerID, "ifname": live.IfName}},
	}, nil)
	if err := plugin.Funcs().GC(&skel.CmdArgs{StdinData: conf}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	recs, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var keys []state.Key
	for _, r := range recs {
		keys = append(keys, r.Key())
	}
	want := []state.Key{live, other}
	sortKeys := cmpopts.SortSlices(func(a, b state.Key) bool { return a.String() < b.String() })
	if diff := cmp.Diff(want, keys, sortKeys); diff != "" {
		t.Errorf("records after GC (-want +got):\n%s", diff)
	}
}

// TestStatus answers 50 when ADD could not work: records cannot be written
// or the sysfs root cannot be read. It needs no namespace.
func TestStatus(t *testing.T) {
	cases := []struct {
		name  string
		paths func(t *testing.T, sysRoot string) (stateDir, sysfsRoot string)
		code  uint
		msg   string
	}{
		{name: "ready", paths: func(t *testing.T, sysRoot string) (string, string) {
			return filepath.Join(t.TempDir(), "state"), sysRoot
		}},
		{name: "state directory under a file", code: types.ErrPluginNotAvailable, msg: "state directory",
			paths: func(t *testing.T, sysRoot string) (string, string) {
				file := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(file, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(file, "state"), sysRoot
			}},
		{name: "sysfs root without bus/pci", code: types.ErrPluginNotAvailable, msg: "is not readable",
			paths: func(t *testing.T, _ string) (string, string) {
				return filepath.Join(t.TempDir(), "state"), t.TempDir()
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stateDir, sysRoot := tc.paths(t, sysfstest.New(t).Root)
			conf := stdin(t, map[string]any{"cniVersion": "1.1.0", "name": network, "type": plugin.Name,
				"sysfsRoot": sysRoot, "stateDir": stateDir, "logFile": filepath.Join(t.TempDir(), "plugin.log")}, nil)
			err := testutils.CmdStatus(func() error { return plugin.Funcs().Status(&skel.CmdArgs{StdinData: conf}) })
			if got := cniCode(t, err); got != tc.code {
				t.Fatalf("STATUS: code %d (%v), want %d", got, err, tc.code)
			}
			if tc.code != 0 && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("STATUS error does not say %q: %v", tc.msg, err)
			}
		})
	}
}

// TestAddWaitsForTheGUIDLock: in RDMA netns exclusive mode ADD takes its
// VF's GUID lock before it looks for other attached VFs with that GUID and
// keeps it until its own entry and record are written. While another holds
// it (another ADD between its check and its record), ADD waits and writes
// nothing; once it is released, ADD goes on. In shared mode (the host's
// GUID index sees every device) it takes no GUID lock.
func TestAddWaitsForTheGUIDLock(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			f := newFixture(t, node)
			if exclusive {
				f.exclusiveMode(t)
			}
			held, err := f.store.LockGUID(f.vf.NodeGUID)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock()
			f.moveIn(t, f.pod, "net1")
			a := args("ctr-wait", f.pod, "net1", stdin(t, f.conf(nil), hostDeviceResult(f.pod, "net1")))
			done := make(chan error, 1)
			go func() {
				done <- f.host.Do(func(ns.NetNS) error {
					_, _, err := testutils.CmdAddWithArgs(a, func() error { return plugin.Funcs().Add(a) })
					return err
				})
			}()
			if !exclusive {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("ADD: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("ADD in shared mode waited 10 s on a GUID lock it should not take")
				}
				return
			}
			select {
			case err := <-done:
				t.Fatalf("ADD returned (%v) while another held its VF's GUID lock", err)
			case <-time.After(500 * time.Millisecond):
			}
			if recs := f.records(t); len(recs) != 0 {
				t.Errorf("ADD waiting on the GUID lock already wrote %d records", len(recs))
			}
			held.Unlock()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ADD after the GUID lock was released: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ADD still waiting 10 s after the GUID lock was released")
			}
			if recs := f.records(t); len(recs) != 1 {
				t.Errorf("%d records after ADD, want 1", len(recs))
			}
		})
	}
}
