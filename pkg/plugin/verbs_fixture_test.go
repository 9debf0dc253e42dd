package plugin_test

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// network is the name of the fixture's network configuration.
const network = "dgx-ib"

// fixture is one case's node: a DGX H200 fixture sysfs (shared by the
// cases of a test), a network namespace standing in for the host's, a pod netns, a veth stand-in for
// one VF, and a state directory. The verbs run in-process, inside the
// host stand-in, the way host-device's tests run theirs.
type fixture struct {
	sys      *dgx
	vf       sysfstest.DGXVF // the VF under test: PF 0's VF 3, 0000:18:00.5
	host     ns.NetNS
	pod      ns.NetNS
	standIn  *testutil.StandIn
	stateDir string
	logFile  string
	store    *state.Store
}

// dgx is a DGX H200 fixture sysfs shared by the cases of one test:
// building one takes thousands of file operations, a second or more on a
// busy disk. Each case starts from the healthy node (see forCase).
type dgx struct {
	*sysfstest.DGXNode
	tb *caseTB
}

// caseTB is the test the shared fixture reports its errors to: the case
// running.
type caseTB struct{ testing.TB }

func newDGX(t *testing.T) *dgx {
	tb := &caseTB{t}
	return &dgx{DGXNode: sysfstest.NewDGXH200(tb), tb: tb}
}

// forCase hands the node to case t with vf as NewDGXH200 made it: on the
// host, its RDMA device's GUID and port healthy. That is all a case changes.
func (n *dgx) forCase(t *testing.T, vf sysfstest.DGXVF) {
	t.Helper()
	n.tb.TB = t
	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	n.SetNetDev(vf.PCI, vf.NetDev)
}

// newFixture sets up one case on node. The VF's stand-in is made on the
// host under its predictable name, with the stable altname the host's
// .link files give it; moveIn hands it to the pod as host-device would.
func newFixture(t *testing.T, node *dgx) *fixture {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	f := &fixture{
		sys:      node,
		vf:       node.PFs[0].VFs[3],
		host:     testutil.NewNetns(t),
		pod:      testutil.NewNetns(t),
		stateDir: filepath.Join(dir, "state"),
		logFile:  filepath.Join(dir, "plugin.log"),
	}
	node.forCase(t, f.vf)
	f.store = state.NewStore(f.stateDir)
	f.inHost(t, func() { f.standIn = testutil.NewStandIn(t, f.vf.NetDev, f.vf.PCI, true) })
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(f.logFile)
			t.Logf("plugin log:\n%s", b)
		}
	})
	return f
}

// inHost runs fn with the calling thread in the host stand-in.
func (f *fixture) inHost(t *testing.T, fn func()) {
	t.Helper()
	if err := f.host.Do(func(ns.NetNS) error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// moveIn moves the VF from the host into pod under name, as host-device's
// ADD does: the host name goes into the alias, the link moves, is renamed
// and set up. The host's sysfs no longer lists its netdev.
func (f *fixture) moveIn(t *testing.T, pod ns.NetNS, name string) {
	t.Helper()
	f.inHost(t, func() {
		l, err := netlinksafe.LinkByName(f.vf.NetDev)
		if err == nil {
			err = netlink.LinkSetAlias(l, f.vf.NetDev)
		}
		if err == nil {
			err = netlink.LinkSetDown(l)
		}
		if err == nil {
			err = netlink.LinkSetNsFd(l, int(pod.Fd()))
		}
		if err != nil {
			t.Fatalf("move %s into %s: %v", f.vf.NetDev, pod.Path(), err)
		}
	})
	renameUp(t, pod, f.vf.NetDev, name)
	f.sys.RemoveNetDev(f.vf.PCI, f.vf.NetDev)
}

// moveBetween moves a link from one pod to another under a new name, as
// the kernel returning a VF and host-device handing it to the next pod do.
func moveBetween(t *testing.T, from, to ns.NetNS, name, newName string) {
	t.Helper()
	err := from.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(l, int(to.Fd()))
	})
	if err != nil {
		t.Fatalf("move %s from %s to %s: %v", name, from.Path(), to.Path(), err)
	}
	renameUp(t, to, name, newName)
}

func renameUp(t *testing.T, n ns.NetNS, from, to string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(from)
		if err != nil {
			return err
		}
		if from != to {
			if err := netlink.LinkSetName(l, to); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		t.Fatalf("rename %s to %s in %s: %v", from, to, n.Path(), err)
	}
}

// inNetns changes links of a netns with netlink directly (the test's hand,
// not the plugin's).
func inNetns(t *testing.T, n ns.NetNS, fn func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return fn() }); err != nil {
		t.Fatalf("in %s: %v", n.Path(), err)
	}
}

// addVeth adds a veth pair, name and p<name>, to a netns: some other link
// holding a name.
func addVeth(t *testing.T, n ns.NetNS, name string) {
	t.Helper()
	inNetns(t, n, func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "p" + name})
	})
}

// withLink runs fn on the link named name in a netns.
func withLink(t *testing.T, n ns.NetNS, name string, fn func(netlink.Link) error) {
	t.Helper()
	inNetns(t, n, func() error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		return fn(l)
	})
}

// linkState is what a test compares of a link before and after a verb.
type linkState struct {
	Name     string
	Kind     string
	AltNames []string
	Alias    string
	MAC      string
	MTU      int
	Up       bool
}

// links lists a netns's links by name.
func links(t *testing.T, n ns.NetNS) []linkState {
	t.Helper()
	var out []linkState
	inNetns(t, n, func() error {
		ls, err := netlinksafe.LinkList()
		for _, l := range ls {
			a := l.Attrs()
			alt := slices.Sorted(slices.Values(a.AltNames))
			out = append(out, linkState{Name: a.Name, Kind: l.Type(), AltNames: alt, Alias: a.Alias,
				MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0})
		}
		return err
	})
	slices.SortFunc(out, func(a, b linkState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// link returns the state of the named link of a netns, or nil.
func link(t *testing.T, n ns.NetNS, name string) *linkState {
	t.Helper()
	for _, l := range links(t, n) {
		if l.Name == name {
			return &l
		}
	}
	return nil
}

// conf is the plugin's configuration as Multus writes it (deviceID),
// with extra merged in (a nil value deletes a key).
func (f *fixture) conf(extra map[string]any) map[string]any {
	return testutil.Merge(map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": plugin.Name,
		"deviceID": f.vf.PCI, "sysfsRoot": f.sys.Root, "stateDir": f.stateDir,
		"logFile": f.logFile, "logLevel": "debug", "linkLayer": "infiniband", "portWaitMs": 200,
	}, extra)
}

// hostDeviceResult is the prevResult host-device hands us: its interface
// in the pod under ifName, with a MAC it read before udev or anyone else
// changed the link (stale here on purpose: ADD must correct it), no pciID,
// and an address from IPAM pointing at it.
func hostDeviceResult(pod ns.NetNS, ifName string) *current.Result {
	idx := 0
	return &current.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*current.Interface{{Name: ifName, Mac: "02:00:00:00:00:01", Sandbox: pod.Path()}},
		IPs: []*current.IPConfig{{Interface: &idx, Address: net.IPNet{
			IP: net.IPv4(192, 168, 7, 3), Mask: net.CIDRMask(24, 32)}}},
	}
}

// stdin renders a configuration with prevResult (none when prev is nil).
func stdin(t *testing.T, conf map[string]any, prev types.Result) []byte {
	t.Helper()
	if prev != nil {
		conf["prevResult"] = prev
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// args are the runtime's arguments for one attachment in pod.
func args(containerID string, pod ns.NetNS, ifName string, stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: containerID, Netns: pod.Path(), IfName: ifName, StdinData: stdin}
}

// add runs ADD in-process inside the host stand-in and returns the result
// it printed, decoded as the configuration's cniVersion (testutils checks
// that it decodes as that version) and converted to the current type.
func (f *fixture) add(t *testing.T, a *skel.CmdArgs) (*current.Result, error) {
	t.Helper()
	var res types.Result
	var err error
	f.inHost(t, func() {
		res, _, err = testutils.CmdAddWithArgs(a, func() error { return plugin.Funcs().Add(a) })
	})
	if err != nil {
		return nil, err
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(a.StdinData, &conf); err != nil {
		t.Fatal(err)
	}
	if res.Version() != conf.CNIVersion {
		t.Errorf("ADD printed a %s result for a %s configuration", res.Version(), conf.CNIVersion)
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatalf("ADD's result does not convert to %s: %v", current.ImplementedSpecVersion, err)
	}
	return cur, nil
}

// check runs CHECK in-process inside the host stand-in.
func (f *fixture) check(t *testing.T, a *skel.CmdArgs) error {
	t.Helper()
	return f.run(t, a, testutils.CmdCheckWithArgs, plugin.Funcs().Check)
}

// del runs DEL in-process inside the host stand-in.
func (f *fixture) del(t *testing.T, a *skel.CmdArgs) error {
	t.Helper()
	return f.run(t, a, testutils.CmdDelWithArgs, plugin.Funcs().Del)
}

// run calls verb inside the host stand-in, wrapped by testutils, which
// sets the CNI_* environment as a runtime would.
func (f *fixture) run(t *testing.T, a *skel.CmdArgs, wrap func(*skel.CmdArgs, func() error) error, verb func(*skel.CmdArgs) error) error {
	t.Helper()
	var err error
	f.inHost(t, func() { err = wrap(a, func() error { return verb(a) }) })
	return err
}

// attach moves the VF into the pod as net1 and runs a successful ADD for
// containerID; it returns the ADD's arguments and result.
func (f *fixture) attach(t *testing.T, containerID string) (*skel.CmdArgs, *current.Result) {
	t.Helper()
	f.moveIn(t, f.pod, "net1")
	a := args(containerID, f.pod, "net1", stdin(t, f.conf(nil), hostDeviceResult(f.pod, "net1")))
	res, err := f.add(t, a)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	return a, res
}

// withPrev is a's arguments with prevResult replaced by res (none when
// nil) and extra merged into the configuration.
func (f *fixture) withPrev(t *testing.T, a *skel.CmdArgs, res types.Result, extra map[string]any) *skel.CmdArgs {
	t.Helper()
	b := *a
	b.StdinData = stdin(t, f.conf(extra), res)
	return &b
}

// key is the state key of an attachment in the fixture's network.
func key(containerID, ifName string) state.Key {
	return state.Key{Network: network, ContainerID: containerID, IfName: ifName}
}

// record loads an attachment's record, nil when there is none.
func (f *fixture) record(t *testing.T, k state.Key) *state.Record {
	t.Helper()
	r, err := f.store.Load(k)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("load record %s: %v", k, err)
	}
	return r
}

// records lists every record in the state directory.
func (f *fixture) records(t *testing.T) []*state.Record {
	t.Helper()
	recs, err := f.store.List()
	if err != nil {
		t.Fatalf("list records: %v", err)
	}
	return recs
}

// claims are the records that claim the VF for an attachment other than
// self, as the next ADD of the VF sees them.
func (f *fixture) claims(t *testing.T, self state.Key) []*state.Record {
	t.Helper()
	lock, err := f.store.LockVF(f.vf.PCI)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	recs, err := lock.Claims(f.vf.PCI, self)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// cniCode is the code of a CNI error, 0 for nil; any other error fails.
func cniCode(t *testing.T, err error) uint {
	t.Helper()
	if err == nil {
		return 0
	}
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error is not a CNI error: %T %v", err, err)
	}
	return e.Code
}

// setPort rewrites port 1 of the VF's RDMA device; the unset fields are
// healthy InfiniBand values.
func (f *fixture) setPort(p sysfstest.Port) {
	if p.GID0 == "" {
		p.GID0 = sysfstest.GID0(f.vf.PortGUID)
	}
	f.sys.SetPort(f.vf.PCI, f.vf.RDMA, 1, p)
}

// attachOther attaches another VF of the node to a pod of its own through
// ADD (its stand-in moved in as host-device would) and gives its RDMA
// device back to the host's view when the case ends.
func (f *fixture) attachOther(t *testing.T, vf sysfstest.DGXVF, containerID string) (sysfstest.DGXVF, ns.NetNS) {
	t.Helper()
	pod := testutil.NewNetns(t)
	f.inHost(t, func() { testutil.NewStandIn(t, vf.NetDev, vf.PCI, true) })
	moveBetween(t, f.host, pod, vf.NetDev, "net1")
	f.sys.RemoveNetDev(vf.PCI, vf.NetDev)
	t.Cleanup(func() {
		f.sys.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, FWVer: sysfstest.DGXFirmware,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
		f.sys.SetNetDev(vf.PCI, vf.NetDev)
	})
	conf := f.conf(map[string]any{"deviceID": vf.PCI})
	if _, err := f.add(t, args(containerID, pod, "net1", stdin(t, conf, hostDeviceResult(pod, "net1")))); err != nil {
		t.Fatalf("ADD of VF %s: %v", vf.PCI, err)
	}
	return vf, pod
}

// exclusiveMode loads ib_core in the fixture, in RDMA netns exclusive
// mode, for the case.
func (f *fixture) exclusiveMode(t *testing.T) {
	dir := filepath.Join(f.sys.Root, "module", "ib_core")
	if err := os.MkdirAll(filepath.Join(dir, "parameters"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.sys.WriteFile(filepath.Join(dir, "parameters", "netns_mode"), "N")
	t.Cleanup(func() { os.RemoveAll(dir) })
}

// hidePFRDMA takes the PF's RDMA device away for the case (a NIC without
// RDMA); the next case gets it back.
func (f *fixture) hidePFRDMA(t *testing.T) {
	pf := f.sys.PFs[0]
	f.sys.HideRDMA(pf.PCI, pf.RDMA)
	t.Cleanup(func() {
		f.sys.SetRDMA(pf.PCI, sysfstest.RDMA{Name: pf.RDMA, NodeGUID: pf.NodeGUID, FWVer: sysfstest.DGXFirmware,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(pf.NodeGUID)}}})
	})
}

// logLines returns the plugin log's lines that hold every one of subs.
func (f *fixture) logLines(t *testing.T, subs ...string) []string {
	t.Helper()
	b, err := os.ReadFile(f.logFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

// wantOneWarning checks that the plugin logged exactly one warning, and
// that it holds every one of subs and names the VF.
func (f *fixture) wantOneWarning(t *testing.T, subs ...string) {
	t.Helper()
	warns := f.logLines(t, "level=WARN")
	if len(warns) != 1 {
		t.Fatalf("want one warning, got %d: %q", len(warns), warns)
	}
	for _, s := range append(subs, "vf="+f.vf.PCI) {
		if !strings.Contains(warns[0], s) {
			t.Errorf("the warning does not say %q: %s", s, warns[0])
		}
	}
}

// setNodeGUID changes the VF's node GUID in place, as a write to the PF's
// VF GUID attribute shows through the VF's RDMA device.
func (f *fixture) setNodeGUID(guid string) {
	f.sys.WriteFile(filepath.Join(f.sys.RDMAPath(f.vf.PCI, f.vf.RDMA), "node_guid"), guid)
}

func requireRoot(t *testing.T) {
	testutil.RequireRoot(t, "makes network namespaces and veth stand-ins for VFs")
}
