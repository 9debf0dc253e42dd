package sysfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const (
	pf0 = "0000:18:00.0"
	vf0 = "0000:18:00.2"
	vf1 = "0000:18:00.3"
	vf7 = "0000:18:01.1"
)

func activeIB(n int) sysfs.Port {
	return sysfs.Port{Num: n, State: sysfs.PortState{Num: 4, Name: "ACTIVE"},
		PhysState: sysfs.PhysState{Num: 5, Name: "LinkUp"}, LinkLayer: "InfiniBand"}
}

// smallNode is one PF with three VFs: VF 0 with an RDMA device (with a
// system image GUID, which VF 7's lacks) and one IB port, VF 1 a plain netdev, VF 7 with a dual-port RDMA device whose second
// port is a down Ethernet port. Indexes are not dense, as after a VF was
// removed or when sriov_numvfs is large.
func smallNode(t *testing.T) *sysfstest.Tree {
	tree := sysfstest.New(t)
	tree.AddPF(pf0, 16, sysfstest.Device{NetDev: "ibp24s0f0",
		RDMA: &sysfstest.RDMA{Name: "mlx5_0", NodeGUID: "a088:c203:0018:1000", FWVer: "28.43.1014"}})
	tree.AddVF(pf0, 0, vf0, sysfstest.Device{NetDev: "ibp24s0f0v0",
		RDMA: &sysfstest.RDMA{Name: "mlx5_10", NodeGUID: "a288:c2ff:fe18:0000", SysImageGUID: "a088:c203:0018:1000", FWVer: "28.43.1014"}})
	tree.AddVF(pf0, 1, vf1, sysfstest.Device{NetDev: "ens1f0v1"})
	tree.AddVF(pf0, 7, vf7, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_17", NodeGUID: "a288:c2ff:fe18:0007",
		Ports: []sysfstest.Port{{}, {State: "1: DOWN", PhysState: "3: Disabled", LinkLayer: "Ethernet"}}}})
	return tree
}

func TestReadVF(t *testing.T) {
	tree := smallNode(t)
	r := sysfs.Reader{Root: tree.Root}
	tests := []struct {
		name, addr string
		want       *sysfs.VF
	}{
		{"VF with one IB port", vf0, &sysfs.VF{PCI: vf0, PF: pf0, Index: 0, RDMA: []sysfs.RDMADevice{{
			Name: "mlx5_10", PCI: vf0, NodeGUID: 0xa288c2fffe180000, SysImageGUID: 0xa088c20300181000, Ports: []sysfs.Port{activeIB(1)},
		}}}},
		{"plain netdev VF", vf1, &sysfs.VF{PCI: vf1, PF: pf0, Index: 1}},
		{"VF with two ports, index from virtfn7", vf7, &sysfs.VF{PCI: vf7, PF: pf0, Index: 7, RDMA: []sysfs.RDMADevice{{
			Name: "mlx5_17", PCI: vf7, NodeGUID: 0xa288c2fffe180007, Ports: []sysfs.Port{activeIB(1), {
				Num: 2, State: sysfs.PortState{Num: 1, Name: "DOWN"}, PhysState: sysfs.PhysState{Num: 3, Name: "Disabled"},
				LinkLayer: "Ethernet",
			}},
		}}}},
		{"PF itself has no physfn", pf0, &sysfs.VF{PCI: pf0, Index: -1, RDMA: []sysfs.RDMADevice{{
			Name: "mlx5_0", PCI: pf0, NodeGUID: 0xa088c20300181000, Ports: []sysfs.Port{activeIB(1)},
		}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.ReadVF(tc.addr)
			if err != nil {
				t.Fatalf("ReadVF(%s): %v", tc.addr, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadVF(%s) (-want +got):\n%s", tc.addr, diff)
			}
		})
	}
}

func TestReadVFStandaloneDevice(t *testing.T) {
	tree := sysfstest.New(t)
	tree.AddDevice("0000:3b:00.0", sysfstest.Device{NetDev: "ens3"})
	got, err := sysfs.Reader{Root: tree.Root}.ReadVF("0000:3b:00.0")
	if err != nil {
		t.Fatalf("ReadVF: %v", err)
	}
	if diff := cmp.Diff(&sysfs.VF{PCI: "0000:3b:00.0", Index: -1}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReadVFRDMAOrder(t *testing.T) {
	// Two RDMA devices on one function come back sorted by name; ports
	// sorted numerically, not as ReadDir's "1" < "10" < "2".
	tree := sysfstest.New(t)
	ports := make([]sysfstest.Port, 10)
	tree.AddDevice(vf0, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_9", NodeGUID: "0000:0000:0000:0009", Ports: ports}})
	tree.SetRDMA(vf0, sysfstest.RDMA{Name: "mlx5_1", NodeGUID: "0000:0000:0000:0001"})
	got, err := sysfs.Reader{Root: tree.Root}.ReadVF(vf0)
	if err != nil {
		t.Fatalf("ReadVF: %v", err)
	}
	var names []string
	var nums []int
	for _, d := range got.RDMA {
		names = append(names, d.Name)
	}
	for _, p := range got.RDMA[1].Ports {
		nums = append(nums, p.Num)
	}
	if diff := cmp.Diff([]string{"mlx5_1", "mlx5_9"}, names); diff != "" {
		t.Errorf("RDMA order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nums); diff != "" {
		t.Errorf("port order (-want +got):\n%s", diff)
	}
}

func TestReadVFErrors(t *testing.T) {
	tests := []struct {
		name     string
		break_   func(t *testing.T, tree *sysfstest.Tree)
		addr     string
		noDevice bool
		file     string // when set, the error must name this file by its full path
	}{
		{"missing device", nil, "0000:99:00.0", true, ""},
		{"PF lost its virtfn link", func(t *testing.T, tree *sysfstest.Tree) {
			mustRemove(t, filepath.Join(tree.DevicePath(pf0), "virtfn1"))
		}, vf1, false, ""},
		{"garbage node_guid", func(t *testing.T, tree *sysfstest.Tree) {
			tree.WriteFile(filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "node_guid"), "not-a-guid")
		}, vf0, false, ""},
		{"missing node_guid", func(t *testing.T, tree *sysfstest.Tree) {
			mustRemove(t, filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "node_guid"))
		}, vf0, false, "infiniband/mlx5_10/node_guid"},
		{"garbage port state", func(t *testing.T, tree *sysfstest.Tree) {
			tree.WriteFile(filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "ports", "1", "state"), "ACTIVE")
		}, vf0, false, ""},
		{"garbage phys_state", func(t *testing.T, tree *sysfstest.Tree) {
			tree.WriteFile(filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "ports", "1", "phys_state"), "")
		}, vf0, false, ""},
		{"missing link_layer", func(t *testing.T, tree *sysfstest.Tree) {
			mustRemove(t, filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "ports", "1", "link_layer"))
		}, vf0, false, "infiniband/mlx5_10/ports/1/link_layer"},
		{"non-numeric port directory", func(t *testing.T, tree *sysfstest.Tree) {
			if err := os.Mkdir(filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "ports", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, vf0, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree := smallNode(t)
			if tc.break_ != nil {
				tc.break_(t, tree)
			}
			vf, err := sysfs.Reader{Root: tree.Root}.ReadVF(tc.addr)
			if err == nil {
				t.Fatalf("ReadVF(%s) = %+v, want an error", tc.addr, vf)
			}
			if got := errors.Is(err, sysfs.ErrNoDevice); got != tc.noDevice {
				t.Errorf("errors.Is(%v, ErrNoDevice) = %v, want %v", err, got, tc.noDevice)
			}
			if want := filepath.Join(tree.Root, "bus", "pci", "devices", tc.addr, tc.file); tc.file != "" && !strings.Contains(err.Error(), want) {
				t.Errorf("ReadVF(%s) error %q does not name %s", tc.addr, err, want)
			}
		})
	}
}

func TestReadVFMissingRoot(t *testing.T) {
	_, err := sysfs.Reader{Root: filepath.Join(t.TempDir(), "nothing")}.ReadVF(vf0)
	if !errors.Is(err, sysfs.ErrNoDevice) {
		t.Errorf("ReadVF under a missing root: %v, want ErrNoDevice", err)
	}
}

// TestDGX reads the whole DGX H200 fixture (one tree, it takes a while to
// build): every VF's PF, index, RDMA device and GUID, and no GUID shared.
func TestDGX(t *testing.T) {
	node := sysfstest.NewDGXH200(t)
	r := sysfs.Reader{Root: node.Root}
	for _, pf := range node.PFs {
		for _, want := range pf.VFs {
			got, err := r.ReadVF(want.PCI)
			if err != nil {
				t.Fatalf("ReadVF(%s): %v", want.PCI, err)
			}
			if got.PF != pf.PCI || got.Index != want.Index || len(got.RDMA) != 1 ||
				got.RDMA[0].Name != want.RDMA || got.RDMA[0].NodeGUID.String() != want.NodeGUID {
				t.Errorf("ReadVF(%s) = PF %s index %d RDMA %+v; want PF %s index %d %s %s",
					want.PCI, got.PF, got.Index, got.RDMA, pf.PCI, want.Index, want.RDMA, want.NodeGUID)
			}
		}
	}
	guids, err := r.NodeGUIDs()
	if err != nil {
		t.Fatalf("NodeGUIDs: %v", err)
	}
	devices := 0
	for g, pcis := range guids {
		devices += len(pcis)
		if len(pcis) != 1 {
			t.Errorf("GUID %s held by %v on a healthy node", g, pcis)
		}
	}
	if want := sysfstest.DGXCards * sysfstest.DGXPFsPerCard * (1 + sysfstest.DGXVFsPerPF); devices != want {
		t.Errorf("%d RDMA devices, want %d", devices, want)
	}
}

func TestVFs(t *testing.T) {
	tree := smallNode(t)
	// Entries that look like virtfnN but are not must be skipped.
	if err := os.Mkdir(filepath.Join(tree.DevicePath(pf0), "virtfnX"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := sysfs.Reader{Root: tree.Root}
	got, err := r.VFs(pf0)
	if err != nil {
		t.Fatalf("VFs: %v", err)
	}
	if diff := cmp.Diff(map[int]string{0: vf0, 1: vf1, 7: vf7}, got); diff != "" {
		t.Errorf("VFs(%s) (-want +got):\n%s", pf0, diff)
	}
	got, err = r.VFs(vf0)
	if err != nil || len(got) != 0 {
		t.Errorf("VFs of a VF = %v, %v; want empty", got, err)
	}
	if _, err := r.VFs("0000:99:00.0"); err == nil {
		t.Error("VFs of a missing PF succeeded")
	}
}

func TestNodeGUIDs(t *testing.T) {
	tree := smallNode(t)
	const dupA, dupB, broken = "0000:18:01.2", "0000:18:01.3", "0000:18:01.4"
	// Two more VFs sharing one GUID, one VF with an unassigned GUID, and
	// one whose node_guid cannot be parsed (skipped, not fatal).
	tree.AddVF(pf0, 8, dupA, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_18", NodeGUID: "a288:c2ff:fe18:0000"}})
	tree.AddVF(pf0, 9, dupB, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_19", NodeGUID: "a288:c2ff:fe18:0000"}})
	tree.AddVF(pf0, 10, "0000:18:01.5", sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_20", NodeGUID: "0000:0000:0000:0000"}})
	tree.AddVF(pf0, 11, broken, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_21", NodeGUID: "zzzz"}})
	got, err := sysfs.Reader{Root: tree.Root}.NodeGUIDs()
	if err != nil {
		t.Fatalf("NodeGUIDs: %v", err)
	}
	want := map[sysfs.GUID][]string{
		0xa088c20300181000: {pf0},
		// class/infiniband lists mlx5_10, mlx5_18, mlx5_19 in that order.
		0xa288c2fffe180000: {vf0, dupA, dupB},
		0xa288c2fffe180007: {vf7},
		0:                  {"0000:18:01.5"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NodeGUIDs (-want +got):\n%s", diff)
	}
}

func TestNodeGUIDsWithoutInfiniband(t *testing.T) {
	root := t.TempDir()
	got, err := sysfs.Reader{Root: root}.NodeGUIDs()
	if err != nil || len(got) != 0 {
		t.Errorf("NodeGUIDs with no class/infiniband = %v, %v; want empty, nil", got, err)
	}
}

func TestReadable(t *testing.T) {
	tree := sysfstest.New(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root string
		ok         bool
	}{
		{"fixture tree", tree.Root, true},
		{"regular file", file, false},
		{"missing path", filepath.Join(t.TempDir(), "missing"), false},
		{"directory that is not sysfs", t.TempDir(), false},
	}
	for _, tc := range tests {
		err := sysfs.Reader{Root: tc.root}.Readable()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Readable() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestPCIPath(t *testing.T) {
	got := sysfs.Reader{Root: "/host/sys"}.PCIPath(vf0, "infiniband")
	if want := "/host/sys/bus/pci/devices/0000:18:00.2/infiniband"; got != want {
		t.Errorf("PCIPath = %q, want %q", got, want)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestFWVer(t *testing.T) {
	tree := smallNode(t)
	r := sysfs.Reader{Root: tree.Root}
	if got, err := r.FWVer(vf0, "mlx5_10"); got != "28.43.1014" || err != nil {
		t.Errorf("FWVer(%s, mlx5_10) = %q, %v; want 28.43.1014", vf0, got, err)
	}
	if got, err := r.FWVer(vf0, "mlx5_99"); got != "" || err != nil {
		t.Errorf("FWVer of a missing RDMA device = %q, %v; want empty, no error", got, err)
	}
}

// TestHostileAttributes: an attribute that is not a regular file (a FIFO,
// which is how a fixture stands for a read that never returns, or a link
// to /dev/zero) or is larger than a page is an error naming it, returned
// at once, for the device it belongs to; the node's other devices read as
// before.
func TestHostileAttributes(t *testing.T) {
	attr := func(tree *sysfstest.Tree, elem ...string) string {
		return filepath.Join(append([]string{tree.RDMAPath(vf0, "mlx5_10")}, elem...)...)
	}
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, tree *sysfstest.Tree) string
		read   func(r sysfs.Reader) error
		want   error
	}{
		{"FIFO fw_ver", func(t *testing.T, tree *sysfstest.Tree) string {
			p := attr(tree, "fw_ver")
			safefiletest.FIFO(t, p)
			return p
		}, func(r sysfs.Reader) error { _, err := r.FWVer(vf0, "mlx5_10"); return err }, safefile.ErrNotRegular},
		{"FIFO ports/1/state", func(t *testing.T, tree *sysfstest.Tree) string {
			p := attr(tree, "ports", "1", "state")
			safefiletest.FIFO(t, p)
			return p
		}, func(r sysfs.Reader) error { _, err := r.ReadVF(vf0); return err }, safefile.ErrNotRegular},
		{"FIFO node_guid", func(t *testing.T, tree *sysfstest.Tree) string {
			p := attr(tree, "node_guid")
			safefiletest.FIFO(t, p)
			return p
		}, func(r sysfs.Reader) error { _, err := r.RDMADevices(vf0); return err }, safefile.ErrNotRegular},
		{"node_guid a link to /dev/zero", func(t *testing.T, tree *sysfstest.Tree) string {
			p := attr(tree, "node_guid")
			safefiletest.Symlink(t, "/dev/zero", p)
			return p
		}, func(r sysfs.Reader) error { _, err := r.ReadVF(vf0); return err }, safefile.ErrNotRegular},
		{"phys_state larger than a page", func(t *testing.T, tree *sysfstest.Tree) string {
			p := attr(tree, "ports", "1", "phys_state")
			safefiletest.Sparse(t, p, 100<<20)
			return p
		}, func(r sysfs.Reader) error { _, err := r.ReadVF(vf0); return err }, safefile.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := smallNode(t)
			path := tc.break_(t, tree)
			r := sysfs.Reader{Root: tree.Root}
			var err error
			safefiletest.Within(t, safefiletest.Prompt, "the read", func() { err = tc.read(r) })
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), filepath.Base(path)) {
				t.Errorf("read with %s: %v, want %v naming %s", tc.name, err, tc.want, path)
			}
			if _, err := r.ReadVF(vf7); err != nil {
				t.Errorf("another VF of the node: %v", err)
			}
		})
	}
}

// TestScanGUIDsSkipsHostileNodeGUID: the GUID index scan leaves out a
// device whose node_guid is a FIFO, as it does one that went away, and
// returns at once.
func TestScanGUIDsSkipsHostileNodeGUID(t *testing.T) {
	tree := smallNode(t)
	safefiletest.FIFO(t, filepath.Join(tree.RDMAPath(vf0, "mlx5_10"), "node_guid"))
	var idx *sysfs.GUIDIndex
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "ScanGUIDs", func() { idx, err = sysfs.Reader{Root: tree.Root}.ScanGUIDs() })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := idx.GUIDs["mlx5_10"]; ok || len(idx.GUIDs) != 2 {
		t.Errorf("GUIDs read: %v; want mlx5_0 and mlx5_17 only", idx.GUIDs)
	}
}
