package doctor

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// key is what the DGX tests assert per finding: the check that fired and
// about what. Messages are for people and free to change.
type key struct {
	Severity Severity
	Check    string
	Subject  string
}

// keys also fails the test for a finding of a check no row of steps
// reports.
func keys(t *testing.T, r *Report) []key {
	t.Helper()
	out := make([]key, 0, len(r.Findings))
	for _, f := range r.Findings {
		if !slices.Contains(reported(), f.Check) {
			t.Errorf("finding of check %q, which no step reports: %s", f.Check, f)
		}
		out = append(out, key{f.Severity, f.Check, f.Subject})
	}
	return out
}

// healthyKernelLog is what a DGX node's kernel log holds about mlx5 on a
// good boot, including an out-of-tree signature warning that is not a fault.
const healthyKernelLog = `[    4.101010] mlx5_core: module verification failed: signature and/or required key missing - tainting kernel
[    4.212345] mlx5_core 0000:18:00.0: firmware version: 28.43.1014
[    4.300000] mlx5_core 0000:18:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 195312Mbps
[    5.000000] mlx5_core 0000:18:00.0: E-Switch: Total vports 18, per vport: max uc(128) max mc(2048)
[    6.100000] mlx5_core 0000:18:00.2: enabling device (0000 -> 0002)
`

// brokenKernelLog has the seed's lines: a driver built for another kernel
// and a PF the driver could not probe.
const brokenKernelLog = `[    3.900000] mlx_compat: loading out-of-tree module taints kernel.
[    4.812345] mlx5_core: Unknown symbol devlink_fmsg_u32_pair_put (err -2)
[    4.812399] mlx5_core: Unknown symbol mlxfw_firmware_flash (err -2)
[    9.100000] mlx5_core 0000:dc:00.0: probe with driver mlx5_core failed with error -22
`

// dgxOnHost builds the DGX fixture with VFs 0-3 of every PF on the host and
// VFs 4-7 inside pods (no host netdev), as on a node running workloads.
func dgxOnHost(t *testing.T) *sysfstest.DGXNode {
	n := sysfstest.NewDGXH200(t)
	for _, pf := range n.PFs {
		for _, vf := range pf.VFs[4:] {
			n.RemoveNetDev(vf.PCI, vf.NetDev)
		}
	}
	return n
}

// hostLinks is the links a node's host netns would hold for the fixture's
// host VF netdevs, each with the default stable altname.
func hostLinks(t *testing.T, n *sysfstest.DGXNode) map[string][]string {
	links := map[string][]string{}
	for _, pf := range n.PFs {
		for _, vf := range pf.VFs[:min(4, len(pf.VFs))] {
			alt, err := config.RenderAltName(config.DefaultAltName, vf.PCI, pf.PCI, vf.Index)
			if err != nil {
				t.Fatal(err)
			}
			links[vf.NetDev] = []string{alt}
		}
	}
	return links
}

// inHostNetns runs fn in a private network namespace holding one veth per
// entry of links, named like the fixture's host VF netdevs and carrying the
// given altnames: the fixture's sysfs then describes that netns the way a
// node's sysfs describes its host netns. veth has no PCI parent, so the
// doctor finds these links by their sysfs name.
func inHostNetns(t *testing.T, links map[string][]string, fn func() (*Report, error)) (*Report, error) {
	t.Helper()
	requireRoot(t)
	rep, runErr, err := withHostLinks(links, fn)
	if err != nil {
		t.Fatal(err)
	}
	return rep, runErr
}

func requireRoot(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "creates links with altnames in a private network namespace")
}

// withHostLinks is inHostNetns without the test: it returns what fails in
// setting up the netns as err, so a test can run it under a time bound.
func withHostLinks(links map[string][]string, fn func() (*Report, error)) (rep *Report, runErr, err error) {
	netns, err := ns.TempNetNS()
	if err != nil {
		return nil, nil, fmt.Errorf("create network namespace: %w", err)
	}
	defer netns.Close()
	err = netns.Do(func(ns.NetNS) error {
		for i, name := range slices.Sorted(maps.Keys(links)) {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: fmt.Sprintf("peer%d", i)}
			if err := netlink.LinkAdd(veth); err != nil {
				return fmt.Errorf("add veth %s: %w", name, err)
			}
			for _, alt := range links[name] {
				if err := netlink.LinkAddAltName(veth, alt); err != nil {
					return fmt.Errorf("add altname %s to %s: %w", alt, name, err)
				}
			}
		}
		rep, runErr = fn()
		return nil
	})
	return rep, runErr, err
}

func TestHealthyDGXH200HasNoFindings(t *testing.T) {
	n := dgxOnHost(t)
	opts := Options{
		SysfsRoot: n.Root,
		KernelLog: testutil.WriteTemp(t, "dmesg.txt", healthyKernelLog),
		ExpectVFs: sysfstest.DGXVFsPerPF,
		LinkLayer: config.LinkLayerInfiniBand,
	}
	rep, err := inHostNetns(t, hostLinks(t, n), func() (*Report, error) { return Run(opts) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]key{}, keys(t, rep)); diff != "" {
		t.Errorf("healthy node has findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	if rep.PFs != 8 || rep.VFs != 64 {
		t.Errorf("found %d PFs and %d VFs, want 8 and 64", rep.PFs, rep.VFs)
	}
}

// breakDGX injects every fault the doctor knows into a DGX fixture and
// returns the host links with their altnames as the broken node has them.
func breakDGX(t *testing.T, n *sysfstest.DGXNode) map[string][]string {
	pf := func(addr string) (int, sysfstest.DGXPF) {
		for i, p := range n.PFs {
			if p.PCI == addr {
				return i, p
			}
		}
		t.Fatalf("fixture has no PF %s", addr)
		return 0, sysfstest.DGXPF{}
	}
	vf := func(addr string) sysfstest.DGXVF {
		for _, p := range n.PFs {
			for _, v := range p.VFs {
				if v.PCI == addr {
					return v
				}
			}
		}
		t.Fatalf("fixture has no VF %s", addr)
		return sysfstest.DGXVF{}
	}

	// driver-bound, driver-probe, sriov-numvfs: a fifth card whose PF the
	// driver failed to probe (and so has no VFs).
	n.AddPF("0000:dc:00.0", sysfstest.DGXTotalVFs, sysfstest.Device{Driver: "-"})
	// firmware-version: a BlueField-3 (SR-IOV off) and card 2 on old firmware.
	n.AddPF("0000:aa:00.0", 0, sysfstest.Device{DeviceID: "0xa2dc", RDMA: &sysfstest.RDMA{
		Name: "mlx5_80", NodeGUID: "5c25:7303:00aa:0000", FWVer: "32.41.1000",
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0("5c25:7303:00aa:0000")}},
	}})
	for _, f := range []string{"sriov_totalvfs", "sriov_numvfs"} {
		if err := os.Remove(filepath.Join(n.DevicePath("0000:aa:00.0"), f)); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range []string{"0000:40:00.0", "0000:40:00.1"} {
		_, p := pf(addr)
		n.WriteFile(filepath.Join(n.RDMAPath(p.PCI, p.RDMA), "fw_ver"), "28.39.1002")
	}
	// link-layer: PF 9a:00.0 fell back to Ethernet, and its VFs with it.
	{
		_, p := pf("0000:9a:00.0")
		n.SetPort(p.PCI, p.RDMA, 1, sysfstest.Port{LinkLayer: "Ethernet", GID0: "fe80:0000:0000:0000:a288:c2ff:fe9a:0001"})
		for _, v := range p.VFs {
			n.SetPort(v.PCI, v.RDMA, 1, sysfstest.Port{LinkLayer: "Ethernet", GID0: "fe80:0000:0000:0000:a288:c2ff:fe9a:0002"})
		}
	}
	// port-state: PF c0:00.0 has no link (its VFs are down with it), and one
	// VF of a healthy PF has its vport forced down.
	{
		_, p := pf("0000:c0:00.0")
		down := sysfstest.Port{State: "1: DOWN", PhysState: "2: Polling", GID0: sysfstest.GID0(p.NodeGUID)}
		n.SetPort(p.PCI, p.RDMA, 1, down)
		for _, v := range p.VFs {
			down.GID0 = sysfstest.GID0(v.PortGUID)
			n.SetPort(v.PCI, v.RDMA, 1, down)
		}
		v := vf("0000:18:00.5")
		n.SetPort(v.PCI, v.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "5: LinkUp", GID0: sysfstest.GID0(v.PortGUID)})
	}
	// guid-invalid: a VF with zero node and port GUIDs, one with all-F.
	{
		v := vf("0000:18:00.2")
		n.SetRDMA(v.PCI, sysfstest.RDMA{Name: v.RDMA, NodeGUID: "0000:0000:0000:0000", FWVer: sysfstest.DGXFirmware,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0("0000:0000:0000:0000")}}})
		v = vf("0000:18:00.3")
		n.SetRDMA(v.PCI, sysfstest.RDMA{Name: v.RDMA, NodeGUID: "ffff:ffff:ffff:ffff", FWVer: sysfstest.DGXFirmware,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(v.PortGUID)}}})
	}
	// guid-duplicate: two VFs on different cards with the same node and
	// port GUIDs, as a GUID script that ignores the PF writes them.
	{
		a, b := vf("0000:40:00.4"), vf("0000:c0:01.2")
		n.SetRDMA(b.PCI, sysfstest.RDMA{Name: b.RDMA, NodeGUID: a.NodeGUID, FWVer: sysfstest.DGXFirmware,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(a.PortGUID)}}})
	}
	// sriov-numvfs: PF c0:00.1 got only 6 of its 8 VFs.
	{
		i, _ := pf("0000:c0:00.1")
		n.SetNumVFs(i, 6)
	}
	// vf-name: a VF left with the kernel's name, one back from a dead pod.
	n.RenameNetDev("0000:40:00.2", vf("0000:40:00.2").NetDev, "eth3")
	n.RenameNetDev("0000:40:00.3", vf("0000:40:00.3").NetDev, "net1")

	links := hostLinks(t, n)
	links["eth3"] = links[vf("0000:40:00.2").NetDev]
	links["net1"] = links[vf("0000:40:00.3").NetDev]
	delete(links, vf("0000:40:00.2").NetDev)
	delete(links, vf("0000:40:00.3").NetDev)
	// vf-altname: one VF lacks its altname; another's is held by its
	// neighbour (a stale rename left it there).
	links[vf("0000:9a:00.2").NetDev] = nil
	stolen := links[vf("0000:9a:00.3").NetDev]
	links[vf("0000:9a:00.3").NetDev] = nil
	links[vf("0000:9a:00.4").NetDev] = append(links[vf("0000:9a:00.4").NetDev], stolen...)
	return links
}

func TestBrokenDGXH200FindsEveryFault(t *testing.T) {
	n := dgxOnHost(t)
	links := breakDGX(t, n)
	opts := Options{
		SysfsRoot: n.Root,
		KernelLog: testutil.WriteTemp(t, "dmesg.txt", brokenKernelLog),
		ExpectVFs: sysfstest.DGXVFsPerPF,
		LinkLayer: config.LinkLayerInfiniBand,
	}
	rep, err := inHostNetns(t, links, func() (*Report, error) { return Run(opts) })
	if err != nil {
		t.Fatal(err)
	}
	want := []key{
		{SeverityError, finding.CheckDriverBound, "0000:dc:00.0"},
		{SeverityError, finding.CheckDriverKernelMismatch, "mlx5_core"},
		{SeverityError, finding.CheckDriverProbe, "0000:dc:00.0"},
		{SeverityError, finding.CheckFirmwareVersion, "0000:40:00.0"},
		{SeverityError, finding.CheckFirmwareVersion, "0000:40:00.1"},
		{SeverityError, finding.CheckFirmwareVersion, "0000:aa:00.0"},
		{SeverityError, finding.CheckGUIDDuplicate, "0000:40:00.4"}, // node GUID
		{SeverityError, finding.CheckGUIDDuplicate, "0000:40:00.4"}, // port GUID
		{SeverityError, finding.CheckGUIDDuplicate, "0000:c0:01.2"},
		{SeverityError, finding.CheckGUIDDuplicate, "0000:c0:01.2"},
		{SeverityError, finding.CheckGUIDInvalid, "0000:18:00.2"}, // node GUID
		{SeverityError, finding.CheckGUIDInvalid, "0000:18:00.2"}, // port GUID
		{SeverityError, finding.CheckGUIDInvalid, "0000:18:00.3"},
		{SeverityError, finding.CheckLinkLayer, "0000:9a:00.0"},
		{SeverityError, finding.CheckPortState, "0000:18:00.5"},
		{SeverityError, finding.CheckPortState, "0000:c0:00.0"},
		{SeverityError, finding.CheckSRIOVNumVFs, "0000:c0:00.1"},
		{SeverityError, finding.CheckSRIOVNumVFs, "0000:dc:00.0"},
		{SeverityError, finding.CheckVFAltName, "0000:9a:00.3"},
		{SeverityWarning, finding.CheckVFAltName, "0000:9a:00.2"},
		{SeverityWarning, finding.CheckVFName, "0000:40:00.2"},
		{SeverityWarning, finding.CheckVFName, "0000:40:00.3"},
	}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	for _, f := range rep.Findings {
		if f.Message == "" || (f.Severity != SeverityInfo && f.Remedy == "") {
			t.Errorf("finding %s/%s has no message or remedy: %+v", f.Check, f.Subject, f)
		}
		// A PF's port finding covers each of its VFs (the device taints
		// read that); every other finding covers nothing.
		var want []string
		if f.Check == finding.CheckPortState || f.Check == finding.CheckLinkLayer {
			for _, pf := range n.PFs {
				if pf.PCI == f.Subject {
					for _, vf := range pf.VFs {
						want = append(want, vf.PCI)
					}
				}
			}
			slices.Sort(want)
		}
		if !slices.Equal(want, f.Covers) {
			t.Errorf("finding %s/%s covers %v, want %v", f.Check, f.Subject, f.Covers, want)
		}
	}
	if t.Failed() {
		return
	}
	if out := os.Getenv("DOCTOR_SAMPLE_OUT"); out != "" {
		// docs/doctor.md's sample output comes from this test (DOCTOR_SAMPLE_OUT=FILE).
		if err := os.WriteFile(out, []byte(text(t, rep)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A node whose mlx5_core never loaded: the driver was built for another
// kernel, so nothing is bound. The mismatch stays an error because the
// driver is still not working.
func TestDriverNotLoaded(t *testing.T) {
	n := sysfstest.New(t)
	n.AddPF("0000:18:00.0", 16, sysfstest.Device{Driver: "-"})
	n.AddPF("0000:18:00.1", 16, sysfstest.Device{Driver: "-"})
	log := testutil.WriteTemp(t, "dmesg.txt", "6,812,4812345,-;mlx5_core: disagrees about version of symbol module_layout\n"+
		"3,813,4812399,-;mlx5_core: Unknown symbol mlx5_core_access_reg (err -22)\n")
	rep, err := Run(Options{SysfsRoot: n.Root, KernelLog: log})
	if err != nil {
		t.Fatal(err)
	}
	want := []key{
		{SeverityError, finding.CheckDriverBound, "0000:18:00.0"},
		{SeverityError, finding.CheckDriverBound, "0000:18:00.1"},
		{SeverityError, finding.CheckDriverKernelMismatch, "mlx5_core"},
		{SeverityError, finding.CheckDriverLoaded, "mlx5_core"},
		{SeverityWarning, finding.CheckSRIOVNumVFs, "0000:18:00.0"},
		{SeverityWarning, finding.CheckSRIOVNumVFs, "0000:18:00.1"},
	}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	if m := findMessage(rep, finding.CheckDriverKernelMismatch); !strings.Contains(m, "2 kernel log line(s)") {
		t.Errorf("mismatch message does not count both lines: %s", m)
	}
}

// Mismatch lines from earlier in the boot, with the driver working now,
// are a warning, not an error; so is an old probe failure of a bound PF.
func TestKernelLogFaultsThatRecovered(t *testing.T) {
	n := sysfstest.New(t)
	n.LoadModule("mlx5_core")
	n.LoadModule("mlx5_ib")
	n.AddPF("0000:18:00.0", 0, sysfstest.Device{RDMA: healthyRDMA("mlx5_0", "a088:c203:0018:1000", "28.44.1036")})
	log := testutil.WriteTemp(t, "dmesg.txt", "[    4.8] mlx5_core: Unknown symbol devlink_fmsg_u32_pair_put (err -2)\n"+
		"[   12.1] mlx5_core 0000:18:00.0: probe_one:2025:(pid 611): mlx5_init_one failed with error code -110\n")
	rep, err := Run(Options{SysfsRoot: n.Root, KernelLog: log})
	if err != nil {
		t.Fatal(err)
	}
	want := []key{
		{SeverityWarning, finding.CheckDriverKernelMismatch, "mlx5_core"},
		{SeverityWarning, finding.CheckDriverProbe, "0000:18:00.0"},
	}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
}

func TestMissingRDMAAndLimits(t *testing.T) {
	n := sysfstest.New(t)
	n.LoadModule("mlx5_core")
	// SR-IOV allowed for 4 VFs only (NUM_OF_VFS=4), 8 expected; no mlx5_ib.
	n.AddPF("0000:18:00.0", 4, sysfstest.Device{})
	// A ConnectX-6 Dx: no minimum in the table.
	// with SR-IOV disabled in its firmware (sriov_totalvfs 0).
	n.AddPF("0000:3b:00.0", 0, sysfstest.Device{DeviceID: "0x101d", RDMA: healthyRDMA("mlx5_1", "0c42:a103:0012:3456", "22.36.1010")})
	rep, err := Run(Options{SysfsRoot: n.Root, ExpectVFs: 8})
	if err != nil {
		t.Fatal(err)
	}
	want := []key{
		{SeverityError, finding.CheckSRIOVNumVFs, "0000:18:00.0"},
		{SeverityError, finding.CheckSRIOVNumVFs, "0000:3b:00.0"}, // allows 0
		{SeverityWarning, finding.CheckDriverLoaded, "mlx5_ib"},
		{SeverityInfo, finding.CheckFirmwareVersion, "0x101d"},
	}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	if m := findMessage(rep, finding.CheckSRIOVNumVFs); !strings.Contains(m, "allows 4 VFs") {
		t.Errorf("limit finding does not name the firmware limit: %s", m)
	}
}

// Without root or outside the netns sysfs describes, altnames cannot be
// read: that is said once, as info, and nothing else changes.
func TestAltNamesOutsideTheirNetns(t *testing.T) {
	n := dgxOnHost(t)
	rep, err := Run(Options{SysfsRoot: n.Root, ExpectVFs: 8, LinkLayer: config.LinkLayerInfiniBand})
	if err != nil {
		t.Fatal(err)
	}
	want := []key{{SeverityInfo, finding.CheckVFAltName, "node"}}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
}

func TestNamePattern(t *testing.T) {
	n := dgxOnHost(t)
	n.RenameNetDev("0000:18:00.2", "ibp24s0f0v0", "ib0")
	rep, err := Run(Options{SysfsRoot: n.Root, NamePattern: regexpMust(t, `^ibp[0-9]+s0f[01]v[0-9]+$`)})
	if err != nil {
		t.Fatal(err)
	}
	got := []key{}
	for _, k := range keys(t, rep) {
		if k.Check == finding.CheckVFName {
			got = append(got, k)
		}
	}
	if diff := cmp.Diff([]key{{SeverityWarning, finding.CheckVFName, "0000:18:00.2"}}, got); diff != "" {
		t.Errorf("vf-name findings (-want +got):\n%s", diff)
	}
}

// This machine's real /sys: the doctor counts the Mellanox functions lspci
// would (counted here from each device's vendor file), reads every one of
// them without a sysfs error, and with none says so and nothing else.
func TestRealSys(t *testing.T) {
	entries, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil {
		t.Fatalf("this machine's /sys: %v", err)
	}
	mellanox := 0
	for _, e := range entries {
		if v, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", e.Name(), "vendor")); err == nil && strings.TrimSpace(string(v)) == VendorMellanox {
			mellanox++
		}
	}
	rep, err := Run(Options{SysfsRoot: "/sys", KernelLog: "/dev/kmsg", LinkLayer: config.LinkLayerInfiniBand, ExpectVFs: 8})
	if err != nil {
		t.Fatalf("doctor on /sys: %v", err)
	}
	if rep.PFs+rep.VFs != mellanox {
		t.Errorf("the doctor counts %d PFs and %d VFs, /sys has %d Mellanox functions\n%s", rep.PFs, rep.VFs, mellanox, text(t, rep))
	}
	for _, k := range keys(t, rep) {
		if k.Check == finding.CheckSysfs {
			t.Errorf("a sysfs read failed on this machine: %+v\n%s", k, text(t, rep))
		}
	}
	if mellanox > 0 {
		t.Logf("this machine has Mellanox devices:\n%s", text(t, rep))
		return
	}
	if diff := cmp.Diff([]key{{SeverityInfo, finding.CheckDevices, "node"}}, keys(t, rep)); diff != "" {
		t.Errorf("findings on a machine without Mellanox devices (-want +got):\n%s\n%s", diff, text(t, rep))
	}
}

func TestUnreadableSysfs(t *testing.T) {
	_, err := Run(Options{SysfsRoot: filepath.Join(t.TempDir(), "nope")})
	if err == nil || !strings.Contains(err.Error(), "not readable") {
		t.Fatalf("got %v, want an error saying sysfs is not readable", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	root := sysfstest.New(t).Root
	for _, o := range []Options{
		{SysfsRoot: root, LinkLayer: "ib"},
		{SysfsRoot: root, ExpectVFs: -1},
		{SysfsRoot: root, AltName: "vf-{nope}"},
	} {
		if _, err := Run(o); err == nil {
			t.Errorf("Run(%+v) accepted invalid options", o)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"28.43.1014", "28.43.1014", 0},
		{"28.43.1015", "28.43.1014", 1},
		{"28.9.2000", "28.43.1014", -1},  // numeric, not lexical
		{"28.100.1000", "28.43.1014", 1}, // numeric, not lexical
		{"32.43.1014 (MT_0000000884)", "32.43.1014", 0},
		{"28.43", "28.43.1014", -1},
		{"29.0.0", "28.43.1014", 1},
	} {
		got, err := compareVersions(tc.a, tc.b)
		if err != nil || got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "28.x.1", "28..1", "v28.43"} {
		if _, err := compareVersions(bad, "28.43.1014"); err == nil {
			t.Errorf("compareVersions(%q) accepted a bad version", bad)
		}
	}
}

func TestKernelLogPatterns(t *testing.T) {
	for _, tc := range []struct {
		line           string
		check, subject string
	}{
		{"[    4.8] mlx5_core: Unknown symbol devlink_fmsg_u32_pair_put (err -2)", finding.CheckDriverKernelMismatch, "mlx5_core"},
		{"4,700,48123,-;mlx5_ib: disagrees about version of symbol ib_register_device", finding.CheckDriverKernelMismatch, "mlx5_ib"},
		{"mlx_compat: version magic '5.15.0-91-generic SMP mod_unload' should be '6.8.0-45-generic SMP preempt mod_unload'", finding.CheckDriverKernelMismatch, "mlx_compat"},
		{"ib_core: no symbol version for module_layout", finding.CheckDriverKernelMismatch, "ib_core"},
		{"mlx5_core: probe of 0000:40:00.1 failed with error -22", finding.CheckDriverProbe, "0000:40:00.1"},
		{"mlx5_core 0000:18:00.0: probe with driver mlx5_core failed with error -5", finding.CheckDriverProbe, "0000:18:00.0"},
		{"mlx5_core 0000:9a:00.0: mlx5_init_one:1573:(pid 1): init one failed", finding.CheckDriverProbe, "0000:9a:00.0"},
		{"mlx5_core: module verification failed: signature and/or required key missing - tainting kernel", "", ""},
		{"mlx5_core 0000:18:00.0: firmware version: 28.43.1014", "", ""},
		{"e1000e: Unknown symbol foo (err -2)", "", ""},
	} {
		n := sysfstest.New(t)
		n.LoadModule("mlx5_core")
		n.AddPF("0000:77:00.0", 0, sysfstest.Device{Driver: "-"}) // keeps faults errors: a PF is unbound
		rep, err := Run(Options{SysfsRoot: n.Root, KernelLog: testutil.WriteTemp(t, "dmesg.txt", tc.line+"\n")})
		if err != nil {
			t.Fatal(err)
		}
		var got []key
		for _, k := range keys(t, rep) {
			if k.Check == finding.CheckDriverKernelMismatch || k.Check == finding.CheckDriverProbe {
				got = append(got, k)
			}
		}
		var want []key
		if tc.check != "" {
			want = []key{{SeverityError, tc.check, tc.subject}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("line %q (-want +got):\n%s", tc.line, diff)
		}
	}
}

func TestKernelLogUnreadable(t *testing.T) {
	n := sysfstest.New(t)
	n.LoadModule("mlx5_core")
	n.AddPF("0000:18:00.0", 0, sysfstest.Device{RDMA: healthyRDMA("mlx5_0", "a088:c203:0018:1000", "28.43.1014")})
	rep, err := Run(Options{SysfsRoot: n.Root, KernelLog: filepath.Join(t.TempDir(), "missing")})
	if err != nil {
		t.Fatal(err)
	}
	got := keys(t, rep)
	if len(got) != 1 || got[0].Check != finding.CheckKernelLog || got[0].Severity != SeverityInfo {
		t.Errorf("got %v, want one info finding about the kernel log", got)
	}
}

// /dev/kmsg is read to its end without blocking for the next message.
func TestReadKmsgDoesNotBlock(t *testing.T) {
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		t.Skipf("no /dev/kmsg on this machine: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readKernelLog("/dev/kmsg")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && os.Geteuid() == 0 {
			t.Fatalf("read /dev/kmsg as root: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading /dev/kmsg blocked for 10s: it must stop at the end of the ring buffer")
	}
}

func regexpMust(t *testing.T, expr string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// healthyRDMA is an RDMA device with one active IB port whose port GUID
// equals the node GUID.
func healthyRDMA(name, guid, fw string) *sysfstest.RDMA {
	return &sysfstest.RDMA{Name: name, NodeGUID: guid, FWVer: fw, Ports: []sysfstest.Port{{GID0: sysfstest.GID0(guid)}}}
}

func findMessage(r *Report, check string) string {
	for _, f := range r.Findings {
		if f.Check == check {
			return f.Message
		}
	}
	return ""
}

func text(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestHostileSysfsAttributes: attributes that are not regular files (a
// FIFO, how a fixture stands for an attribute whose read never returns; a
// link to /dev/zero) are each a sysfs finding about their device, reported
// at once; the rest of the node is checked as before.
func TestHostileSysfsAttributes(t *testing.T) {
	requireRoot(t)
	n := dgxOnHost(t)
	pf, vf, other := n.PFs[0], n.PFs[1].VFs[2], n.PFs[2].VFs[0]
	fwVer := filepath.Join(n.RDMAPath(pf.PCI, pf.RDMA), "fw_ver")
	state := filepath.Join(n.RDMAPath(vf.PCI, vf.RDMA), "ports", "1", "state")
	guid := filepath.Join(n.RDMAPath(other.PCI, other.RDMA), "node_guid")
	safefiletest.FIFO(t, fwVer)
	safefiletest.FIFO(t, state)
	safefiletest.Symlink(t, "/dev/zero", guid)
	links := hostLinks(t, n)
	var rep *Report
	var runErr, err error
	safefiletest.Within(t, safefiletest.Prompt, "the doctor", func() {
		rep, runErr, err = withHostLinks(links, func() (*Report, error) {
			return Run(Options{SysfsRoot: n.Root, ExpectVFs: sysfstest.DGXVFsPerPF, LinkLayer: config.LinkLayerInfiniBand})
		})
	})
	if err = errors.Join(err, runErr); err != nil {
		t.Fatal(err)
	}
	var got []key
	for _, f := range rep.Findings {
		if f.Severity == SeverityError {
			got = append(got, key{f.Severity, f.Check, f.Subject})
		}
	}
	want := []key{{SeverityError, finding.CheckSysfs, pf.PCI}, {SeverityError, finding.CheckSysfs, vf.PCI}, {SeverityError, finding.CheckSysfs, other.PCI}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	for subject, says := range map[string]string{
		pf.PCI:    "fw_ver is a FIFO, not a regular file",
		vf.PCI:    "state is a FIFO, not a regular file",
		other.PCI: "node_guid is a symbolic link to /dev/zero, not a regular file",
	} {
		if msg := findingAbout(rep, finding.CheckSysfs, subject); !strings.Contains(msg, says) {
			t.Errorf("sysfs finding about %s is %q, want it to say %q", subject, msg, says)
		}
	}
	if rep.PFs != 8 || rep.VFs != 64 {
		t.Errorf("found %d PFs and %d VFs, want 8 and 64", rep.PFs, rep.VFs)
	}
}

func findingAbout(r *Report, check, subject string) string {
	for _, f := range r.Findings {
		if f.Check == check && f.Subject == subject {
			return f.Message
		}
	}
	return ""
}
