package plugin_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

var versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

func hasCheck(v string) bool { return v != "0.3.0" && v != "0.3.1" }

func hasPCIID(v string) bool { return v == "1.0.0" || v == "1.1.0" }

const ours = "sriov-stable-cni"

func TestHappyPathEveryVersion(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t, vfOpts{rdma: true, numVFs: 1})
			pod := testutil.NewNetns(t)
			c := e.chain(v, 0, map[string]any{"linkLayer": "infiniband"})
			r := rt("c-happy", pod)
			res, err := c.Add(r)
			if err != nil {
				t.Fatalf("ADD: %v\nlog:\n%s", err, e.logTail())
			}
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			cur := asCurrent(t, res)
			link := testutil.LinkIn(t, pod, "net1")
			if link == nil {
				t.Fatalf("no net1 in pod: %v", testutil.LinksIn(t, pod))
			}
			i := slices.IndexFunc(cur.Interfaces, func(i *current.Interface) bool { return i.Name == "net1" })
			if i < 0 {
				t.Fatalf("result has no net1 interface: %s", mustJSON(cur))
			}
			if got, want := cur.Interfaces[i].Mac, link.Attrs().HardwareAddr.String(); got != want {
				t.Errorf("result mac %s, pod link mac %s", got, want)
			}
			// types/100 serves 1.0.0 and 1.1.0 and keeps pciID for both.
			if got := cur.Interfaces[i].PciID; hasPCIID(v) != (got == testutil.VFAddr(0)) {
				t.Errorf("result pciID %q for version %s", got, v)
			}
			if !slices.Contains(link.Attrs().AltNames, e.vfs[0].AltName) {
				t.Errorf("pod link lacks altname %s: %s", e.vfs[0].AltName, testutil.Describe(link))
			}
			e.wantRecords(1)
			if hasCheck(v) {
				if err := c.Check(r); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			}
			if err := c.Del(r); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			e.wantHome(0)
			e.wantRecords(0)
		})
	}
}

func TestRenameBeforeUsIsRepaired(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil, udev("eth7"))
	r := rt("c-udev", pod)
	res, err := c.Add(r)
	if err != nil {
		t.Fatalf("ADD: %v\nlog:\n%s", err, e.logTail())
	}
	if l := testutil.LinkIn(t, pod, "net1"); l == nil {
		t.Fatalf("VF not repaired to net1; pod holds %v", testutil.LinksIn(t, pod))
	}
	if testutil.LinkIn(t, pod, "eth7") != nil {
		t.Fatalf("eth7 still present in pod")
	}
	cur := asCurrent(t, res)
	if cur.Interfaces[0].Name != "net1" || cur.Interfaces[0].PciID != testutil.VFAddr(0) {
		t.Errorf("result interface %+v", *cur.Interfaces[0])
	}
	if err := c.Check(r); err != nil {
		t.Fatalf("CHECK after repair: %v", err)
	}
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.wantHome(0)
}

func TestRenameAfterAddCaughtByCheckAndDelReturnsVF(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil)
	r := rt("c-drift", pod)
	if _, err := c.Add(r); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	testutil.RenameIn(t, pod, "net1", "eth9")
	// host-device's own CHECK would stop the chain at the rename; CHECK ours.
	err := c.Only(ours).Check(r)
	if harness.ErrCode(err) != 105 || !strings.Contains(err.Error(), "renamed: ") || !strings.Contains(err.Error(), "eth9") {
		t.Fatalf("CHECK after rename: got %v, want code 105 naming the rename", err)
	}
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v\nlog:\n%s", err, e.logTail())
	}
	e.wantHome(0)
	if got := testutil.LinksIn(t, pod); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("pod still holds %v", got)
	}
	e.wantRecords(0)
}

func TestCheckReportsEveryDriftAtOnce(t *testing.T) {
	e := newEnv(t, vfOpts{rdma: true, numVFs: 1})
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil)
	r := rt("c-many", pod)
	if _, err := c.Add(r); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	testutil.RenameIn(t, pod, "net1", "eth3")
	e.sys.SetPort(testutil.VFAddr(0), "mlx5_10", 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	e.sys.WriteFile(e.sys.DevicePath(testutil.VFAddr(0))+"/infiniband/mlx5_10/node_guid", "0000:0000:0000:0000")
	err := c.Only(ours).Check(r)
	if harness.ErrCode(err) != 105 {
		t.Fatalf("CHECK: got %v, want 105", err)
	}
	for _, want := range []string{"renamed: ", "guid: ", "port-down: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CHECK error lacks %q:\n%v", want, err)
		}
	}
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.wantHome(0)
}

// TestVerifyFailuresLeaveNothingChanged: each failed verification returns
// its documented code, undoes our rename and record, and a DEL after the
// failed ADD (as runtimes send) returns the stand-in to the host.
func TestVerifyFailuresLeaveNothingChanged(t *testing.T) {
	cases := []struct {
		name   string
		opts   vfOpts
		extra  map[string]any
		setup  func(e *env)
		code   uint
		substr string
	}{
		{name: "zero GUID", opts: vfOpts{rdma: true, mutate: func(i int, r *sysfstest.RDMA) { r.NodeGUID = "0000:0000:0000:0000" }},
			code: 102, substr: "node GUID is 0000:0000:0000:0000"},
		{name: "all-F GUID", opts: vfOpts{rdma: true, mutate: func(i int, r *sysfstest.RDMA) { r.NodeGUID = "ffff:ffff:ffff:ffff" }},
			code: 102, substr: "ffff:ffff:ffff:ffff"},
		{name: "duplicate GUID", opts: vfOpts{rdma: true, mutate: func(i int, r *sysfstest.RDMA) { r.NodeGUID = guid(0) }},
			code: 102, substr: "also held by"},
		{name: "GUID another node published first", opts: vfOpts{rdma: true}, setup: func(e *env) {
			saveVerdict(e, state.FabricFinding{Kind: "DuplicateNodeGUID", GUID: guid(0), Second: true, Others: []string{"gpu-a/0000:18:00.2"}})
		}, code: 102, substr: "node GUID " + guid(0) + " is also held on the fabric by gpu-a/0000:18:00.2"},
		{name: "IB port down", opts: vfOpts{rdma: true, mutate: func(i int, r *sysfstest.RDMA) {
			r.Ports = []sysfstest.Port{{State: "1: DOWN", PhysState: "2: Polling"}}
		}}, code: 103, substr: "1: DOWN"},
		{name: "no carrier", setup: func(e *env) { e.vfs[0].SetCarrier(e.t, false) }, code: 103, substr: "no carrier"},
		{name: "ethernet where IB expected", opts: vfOpts{rdma: true, mutate: func(i int, r *sysfstest.RDMA) {
			r.Ports = []sysfstest.Port{{LinkLayer: "Ethernet"}}
		}}, extra: map[string]any{"linkLayer": "infiniband"}, code: 104, substr: "link layer is ethernet, expected infiniband"},
		{name: "MTU mismatch", extra: map[string]any{"mtu": 4092}, code: 104, substr: "MTU is 1500, expected 4092"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			if tc.setup != nil {
				tc.setup(e)
			}
			pod := testutil.NewNetns(t)
			c := e.chain("1.1.0", 0, tc.extra, udev("eth7"))
			r := rt("c-fail", pod)
			_, err := c.Add(r)
			if harness.ErrCode(err) != tc.code || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("ADD: got %v, want code %d containing %q", err, tc.code, tc.substr)
			}
			if !strings.Contains(err.Error(), testutil.VFAddr(0)) || !strings.Contains(err.Error(), pod.Path()) {
				t.Errorf("error does not name the VF and netns: %v", err)
			}
			// Our rename to net1 was undone: the VF is as the chain left it.
			if l := testutil.LinkIn(t, pod, "eth7"); l == nil {
				t.Errorf("rename not undone; pod holds %v", testutil.LinksIn(t, pod))
			}
			e.wantRecords(0)
			if err := c.Del(r); err != nil {
				t.Fatalf("DEL after failed ADD: %v\nlog:\n%s", err, e.logTail())
			}
			e.wantHome(0)
		})
	}
}

// saveVerdict writes the fabric controller's verdict on VF 0 into the
// state directory, as the node agent mirrors it.
func saveVerdict(e *env, fs ...state.FabricFinding) {
	e.t.Helper()
	v := &state.FabricVerdicts{Node: "sriov-e2e-node", Mirrored: time.Now(), VFs: map[string][]state.FabricFinding{testutil.VFAddr(0): fs}}
	if err := state.NewStore(e.stateDir).SaveFabricVerdicts(v); err != nil {
		e.t.Fatal(err)
	}
}

// The fabric's verdict refuses only the holder that came second, and only
// while the VF still has the GUID: the first holder attaches, and so does
// a VF whose GUID was fixed before the verdict caught up.
func TestFabricVerdictSparesFirstAndFixed(t *testing.T) {
	for name, f := range map[string]state.FabricFinding{
		"first holder": {Kind: "DuplicateNodeGUID", GUID: guid(0), Others: []string{"gpu-b/0000:18:00.2"}},
		"GUID fixed":   {Kind: "DuplicateNodeGUID", GUID: "b83f:d203:00aa:9999", Second: true, Others: []string{"gpu-a/0000:18:00.2"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, vfOpts{rdma: true})
			saveVerdict(e, f)
			c, r := e.chain("1.1.0", 0, nil), rt("c-fabric", testutil.NewNetns(t))
			if _, err := c.Add(r); err != nil {
				t.Fatalf("ADD: %v\nlog:\n%s", err, e.logTail())
			}
			if err := c.Del(r); err != nil {
				t.Fatalf("DEL: %v", err)
			}
		})
	}
}

// TestDuplicateCheckReusesTheGUIDIndexWhileCurrent: ADD saves the node's
// GUID index and later ADDs reuse it without scanning; a re-probed device
// (how a new GUID reaches a VF) makes the next ADD scan again and catch
// the duplicate; a duplicate that only a stale index shows (a GUID changed
// in place) is confirmed by a fresh scan and does not fail the pod.
func TestDuplicateCheckReusesTheGUIDIndexWhileCurrent(t *testing.T) {
	e := newEnv(t, vfOpts{rdma: true, numVFs: 3})
	index := filepath.Join(e.stateDir, "guid-index")
	indexIno := func() uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(index, &st); err != nil {
			t.Fatalf("GUID index: %v", err)
		}
		return st.Ino
	}
	add := func(vf int, id string) (*libcni.RuntimeConf, *harness.Chain, error) {
		pod := testutil.NewNetns(t)
		c, r := e.chain("1.1.0", vf, nil), rt(id, pod)
		_, err := c.Add(r)
		return r, c, err
	}
	del := func(r *libcni.RuntimeConf, c *harness.Chain) {
		t.Helper()
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL %s: %v", r.ContainerID, err)
		}
	}

	r2, c2, err := add(2, "c-guid-2")
	if err != nil {
		t.Fatalf("first ADD: %v\nlog:\n%s", err, e.logTail())
	}
	saved := indexIno()
	r1, c1, err := add(1, "c-guid-1")
	if err != nil {
		t.Fatalf("second ADD: %v", err)
	}
	if indexIno() != saved {
		t.Error("an ADD with no device changed rewrote the GUID index instead of reusing it")
	}
	del(r1, c1)

	// VF 1 comes back from a rebind with VF 0's GUID.
	e.sys.ReprobeRDMA(testutil.VFAddr(1), sysfstest.RDMA{Name: "mlx5_11", NodeGUID: guid(0), FWVer: "28.43.1014"})
	r0, c0, err := add(0, "c-guid-0")
	if harness.ErrCode(err) != 102 || !strings.Contains(err.Error(), "also held by "+testutil.VFAddr(1)) {
		t.Fatalf("ADD after a re-probe made a duplicate: got %v, want code 102 naming %s", err, testutil.VFAddr(1))
	}
	if indexIno() == saved {
		t.Error("the re-probe did not make ADD scan and save a new index")
	}
	del(r0, c0)

	// VF 1's GUID changes back in place: the index still says guid(0).
	e.sys.WriteFile(filepath.Join(e.sys.RDMAPath(testutil.VFAddr(1), "mlx5_11"), "node_guid"), guid(1))
	r0, c0, err = add(0, "c-guid-0b")
	if err != nil {
		t.Fatalf("ADD failed on a duplicate only the stale index held: %v\nlog:\n%s", err, e.logTail())
	}
	del(r0, c0)
	del(r2, c2)
}

func TestPortPolicyWarnAndIgnoreProceed(t *testing.T) {
	for _, policy := range []string{"warn", "ignore"} {
		t.Run(policy, func(t *testing.T) {
			e := newEnv(t, vfOpts{numVFs: 1})
			e.vfs[0].SetCarrier(t, false)
			pod := testutil.NewNetns(t)
			c := e.chain("1.1.0", 0, map[string]any{"portPolicy": policy})
			r := rt("c-pol", pod)
			if _, err := c.Add(r); err != nil {
				t.Fatalf("ADD with portPolicy=%s: %v", policy, err)
			}
			if err := c.Del(r); err != nil {
				t.Fatalf("DEL: %v", err)
			}
		})
	}
}

func TestNameConflictTouchesNothing(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	// udev renames the VF to eth5 and something else takes net1.
	occupy := udev("eth5")
	occupy["occupyIfName"] = true
	c := e.chain("1.1.0", 0, nil, occupy)
	r := rt("c-conflict", pod)
	_, err := c.Add(r)
	if harness.ErrCode(err) != 101 || !strings.Contains(err.Error(), "held by another link") {
		t.Fatalf("ADD: got %v, want code 101", err)
	}
	if testutil.LinkIn(t, pod, "eth5") == nil {
		t.Fatalf("VF was touched; pod holds %v", testutil.LinksIn(t, pod))
	}
	e.wantRecords(0)
	testutil.DeleteLinkIn(t, pod, "net1")
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.wantHome(0)
}

func TestBadInputGivesClearErrors(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	cases := []struct {
		name   string
		extra  map[string]any
		code   uint
		substr string
	}{
		{"bad deviceID", map[string]any{"deviceID": "18:00.2", "pciBusID": nil}, 7, "invalid deviceID"},
		{"bad pciBusID", map[string]any{"deviceID": nil, "pciBusID": "0000:18:00.9"}, 7, "invalid pciBusID"},
		{"no PCI address", map[string]any{"deviceID": nil, "pciBusID": nil}, 7, "no PCI address"},
		{"bad linkLayer", map[string]any{"linkLayer": "ib"}, 7, "invalid linkLayer"},
		{"bad guidPolicy", map[string]any{"guidPolicy": "maybe"}, 7, "invalid guidPolicy"},
		{"bad portPolicy", map[string]any{"portPolicy": "strict"}, 7, "invalid portPolicy"},
		{"negative portWaitMs", map[string]any{"portWaitMs": -1}, 7, "invalid portWaitMs"},
		{"bad altName", map[string]any{"altName": "vf/{pci}"}, 7, "invalid altName"},
		{"unknown placeholder", map[string]any{"altName": "vf-{bus}"}, 7, "unknown placeholder {bus}"},
		{"relative stateDir", map[string]any{"stateDir": "state"}, 7, "invalid stateDir"},
		{"bad logLevel", map[string]any{"logLevel": "loud"}, 7, "invalid logLevel"},
		{"VF not in sysfs", map[string]any{"deviceID": "0000:5e:00.3"}, 100, "no such PCI device"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testutil.NewNetns(t)
			c := e.chain("1.1.0", 0, tc.extra)
			r := rt("c-bad", pod)
			_, err := c.Add(r)
			if harness.ErrCode(err) != tc.code || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("ADD: got %v, want code %d containing %q", err, tc.code, tc.substr)
			}
			e.wantRecords(0)
			// DEL succeeds even for a config ADD rejects, and returns the VF.
			if err := c.Del(r); err != nil {
				t.Fatalf("DEL with rejected config: %v", err)
			}
			e.wantHome(0)
		})
	}
}

func TestNotChainedIsRejected(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	c := harness.NewChain(t, e.bins, harness.ConfList("1.1.0", "alone", e.ours(0, nil)))
	_, err := c.Add(rt("c-alone", pod))
	if harness.ErrCode(err) != 7 || !strings.Contains(err.Error(), "must be chained after") {
		t.Fatalf("ADD alone: got %v, want code 7 'must be chained after'", err)
	}
	if err := c.Del(rt("c-alone", pod)); err != nil {
		t.Fatalf("DEL alone: %v", err)
	}
}

func TestDelIsIdempotentAndTolerant(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 3})
	t.Run("twice", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		c := e.chain("1.1.0", 0, nil)
		r := rt("c-twice", pod)
		if _, err := c.Add(r); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		// host-device's DEL is not idempotent; ours must be.
		for i := range 2 {
			if err := c.Only(ours).Del(r); err != nil {
				t.Fatalf("repeated DEL #%d: %v", i+1, err)
			}
		}
		e.wantHome(0)
	})
	t.Run("netns gone", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		c := e.chain("1.1.0", 1, nil)
		r := rt("c-gone", pod)
		if _, err := c.Add(r); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		testutil.RemoveNetns(t, pod)
		// host-device fails on a missing netns; ours must not.
		if err := c.Only(ours).Del(r); err != nil {
			t.Fatalf("DEL with netns gone: %v", err)
		}
		e.wantRecords(0)
	})
	t.Run("no record", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		c := e.chain("1.1.0", 2, nil)
		r := rt("c-norec", pod)
		if _, err := c.Add(r); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		for _, f := range e.records() {
			os.Remove(f)
		}
		testutil.RenameIn(t, pod, "net1", "eth4")
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL with no record: %v", err)
		}
		e.wantHome(2)
	})
}

func TestGCRemovesStaleRecords(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 2})
	var rts []*libcni.RuntimeConf
	var chains []*harness.Chain
	for i := range 2 {
		pod := testutil.NewNetns(t)
		c := e.chain("1.1.0", i, nil)
		r := rt(fmt.Sprintf("c-gc-%d", i), pod)
		if _, err := c.Add(r); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		rts, chains = append(rts, r), append(chains, c)
	}
	// A record whose attachment the runtime no longer knows at all.
	ghost := &state.Record{Network: "vfnet", ContainerID: "c-ghost", IfName: "net1", PCI: testutil.VFAddr(1)}
	if err := state.NewStore(e.stateDir).Save(ghost); err != nil {
		t.Fatal(err)
	}
	e.wantRecords(3)
	// GC with only attachment 0 valid; libcni DELs attachment 1 first, then
	// our GC removes the ghost's record.
	err := chains[0].CNI.GCNetworkList(t.Context(), chains[0].List, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: rts[0].ContainerID, IfName: "net1"}}})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	e.wantRecords(1)
	e.wantHome(1)
	if err := chains[0].Del(rts[0]); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	ok := harness.NewChain(t, e.bins, harness.ConfList("1.1.0", "vfnet", e.ours(0, nil)))
	if err := ok.CNI.GetStatusNetworkList(t.Context(), ok.List); err != nil {
		t.Fatalf("STATUS healthy: %v", err)
	}
	file := e.sys.Root + "/bus/pci/devices/" + pf + "/vendor"
	for name, extra := range map[string]map[string]any{
		"stateDir under a file": {"stateDir": file + "/state"},
		"sysfsRoot unreadable":  {"sysfsRoot": filepath.Join(t.TempDir(), "nonexistent-sysfs")}, // inside the allowed roots
	} {
		c := harness.NewChain(t, e.bins, harness.ConfList("1.1.0", "vfnet", e.ours(0, extra)))
		err := c.CNI.GetStatusNetworkList(t.Context(), c.List)
		if harness.ErrCode(err) != 50 {
			t.Errorf("STATUS with %s: got %v, want code 50", name, err)
		}
	}
}

func TestParallelAttachments(t *testing.T) {
	const n = 16
	e := newEnv(t, vfOpts{rdma: true, numVFs: n})
	pods := make([]*libcni.RuntimeConf, n)
	chains := make([]*harness.Chain, n)
	for i := range n {
		chains[i] = e.chain("1.1.0", i, nil)
		pods[i] = rt(fmt.Sprintf("c-par-%d", i), testutil.NewNetns(t))
	}
	run := func(verb string, f func(i int) error) { harness.Parallel(t, n, verb, f) }
	run("ADD", func(i int) error { _, err := chains[i].Add(pods[i]); return err })
	e.wantRecords(n)
	run("CHECK", func(i int) error { return chains[i].Check(pods[i]) })
	run("DEL", func(i int) error { return chains[i].Del(pods[i]) })
	e.wantRecords(0)
	for i := range n {
		e.wantHome(i)
	}
}

// TestDelWhenHostNameIsTaken: the name host-device will restore (its alias)
// was taken on the host while the VF was in the pod, as when another VF
// returns from a deleted netns under the same pod name. Our DEL points the
// alias at a free name so host-device's move home cannot fail with EEXIST
// on every retry and strand the VF.
func TestDelWhenHostNameIsTaken(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil)
	r := rt("c-taken", pod)
	if _, err := c.Add(r); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	squatter := netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e.vfs[0].Host}, PeerName: "squat0"}
	if err := netlink.LinkAdd(&squatter); err != nil {
		t.Fatalf("take the host name: %v", err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(&squatter) })
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL with the host name taken: %v\nlog:\n%s", err, e.logTail())
	}
	if l := testutil.HostLink("vf18s00f2"); l == nil || !slices.Contains(l.Attrs().AltNames, e.vfs[0].AltName) {
		t.Fatalf("VF not home under its fallback name vf18s00f2: %s", testutil.Describe(l))
	}
	e.wantRecords(0)
}

// TestDelGivesTransientHostNameAUniqueOne: a VF that came back from a
// destroyed pod as net7 is ADDed again (host-device records net7 as its host
// name). Other VFs return under such names at any moment, so DEL sends it
// home under its own PCI-derived name instead.
func TestDelGivesTransientHostNameAUniqueOne(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	l := testutil.HostLink(e.vfs[0].Host)
	if err := netlink.LinkSetName(l, "net7"); err != nil {
		t.Fatal(err)
	}
	e.vfs[0].Host = "net7"
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil)
	r := rt("c-transient", pod)
	if _, err := c.Add(r); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if testutil.HostLink("vf18s00f2") == nil {
		t.Fatalf("VF not home as vf18s00f2; host net7: %s", testutil.Describe(testutil.HostLink("net7")))
	}
}

// An attachment made by a release whose default stateDir was the old one
// (/var/lib/cni/sriov-stable) keeps its record across the upgrade: the
// plugin, now defaulting to /run/cni/sriov-stable, adopts it, so CHECK
// passes against it and DEL removes it. The harness hides both host
// directories behind private tmpfs mounts. Another network's record in the
// old directory is left where it is.
func TestUpgradeAdoptsRecordsFromTheOldDefault(t *testing.T) {
	e := newEnv(t, vfOpts{rdma: true, numVFs: 1})
	t.Cleanup(func() {
		os.RemoveAll(config.LegacyStateDir)
		os.RemoveAll(config.DefaultStateDir)
	})
	other := &state.Record{Network: "another-net", ContainerID: "c-other", IfName: "net1", PCI: "0000:3b:00.2",
		Netns: "/var/run/netns/gone", Created: time.Now().UTC()}
	if err := state.NewStore(config.LegacyStateDir).Save(other); err != nil {
		t.Fatal(err)
	}
	pod := testutil.NewNetns(t)
	r := rt("c-upgrade", pod)
	before := e.chain("1.1.0", 0, map[string]any{"stateDir": config.LegacyStateDir}) // the old default, as it applied
	if _, err := before.Add(r); err != nil {
		t.Fatalf("ADD with the old default: %v\nlog:\n%s", err, e.logTail())
	}
	after := e.chain("1.1.0", 0, map[string]any{"stateDir": nil}) // today's default
	if err := after.Check(r); err != nil {
		t.Fatalf("CHECK after the upgrade: %v\nlog:\n%s", err, e.logTail())
	}
	key := state.Key{Network: "vfnet", ContainerID: "c-upgrade", IfName: "net1"}
	if _, err := state.NewStore(config.DefaultStateDir).Load(key); err != nil {
		t.Errorf("record not adopted into %s: %v", config.DefaultStateDir, err)
	}
	if _, err := state.NewStore(config.LegacyStateDir).Load(key); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("record still in %s after adoption: %v", config.LegacyStateDir, err)
	}
	if !strings.Contains(e.logTail(), "adopted records from the old default state directory") {
		t.Errorf("no log line about the adoption:\n%s", e.logTail())
	}
	if err := after.Del(r); err != nil {
		t.Fatalf("DEL after the upgrade: %v", err)
	}
	e.wantHome(0)
	if _, err := state.NewStore(config.DefaultStateDir).Load(key); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("DEL left the adopted record: %v", err)
	}
	if _, err := state.NewStore(config.LegacyStateDir).Load(other.Key()); err != nil {
		t.Errorf("another network's record in the old directory was touched: %v", err)
	}
}
