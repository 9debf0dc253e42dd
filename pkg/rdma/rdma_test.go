package rdma

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink/nl"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// TestGUIDFromNetlink pins the byte order: vishvananda/netlink writes the
// kernel's host-order u64 little-endian, so its string is the sysfs GUID
// backwards. The lab's TestLabRDMA00Module shows the same on a real ib_core.
func TestGUIDFromNetlink(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		bad  bool
	}{
		{in: "c3:b2:a1:00:03:c9:02:00", want: "0002:c903:00a1:b2c3"},
		{in: "00:00:00:00:00:00:00:00", want: "0000:0000:0000:0000"},
		{in: "ff:ff:ff:ff:ff:ff:ff:ff", want: "ffff:ffff:ffff:ffff"},
		{in: "", want: "0000:0000:0000:0000"}, // an attribute the kernel did not send
		{in: "c3:b2:a1:00:03:c9", bad: true},
		{in: "0002:c903:00a1:b2c3", bad: true},
		{in: "zz:b2:a1:00:03:c9:02:00", bad: true},
	} {
		got, err := GUIDFromNetlink(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("GUIDFromNetlink(%q) = %s, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("GUIDFromNetlink(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	// The library's own encoding of a GUID, reproduced: bytes of the u64
	// little-endian, printed as a MAC.
	g, _ := sysfs.ParseGUID("a088:c203:0018:1000")
	s := net.HardwareAddr(binary.LittleEndian.AppendUint64(nil, uint64(g))).String()
	if s != "00:10:18:00:03:c2:88:a0" {
		t.Fatalf("the library's encoding of %s reproduced as %s", g, s)
	}
	if back, err := GUIDFromNetlink(s); err != nil || back != g {
		t.Errorf("round trip of %s through %q = %s, %v", g, s, back, err)
	}
}

func TestParsePort(t *testing.T) {
	attr := func(typ uint16, v []byte) syscall.NetlinkRouteAttr {
		return syscall.NetlinkRouteAttr{Attr: syscall.RtAttr{Type: typ, Len: uint16(4 + len(v))}, Value: v}
	}
	ndev := nl.Uint32Attr(7)
	got, err := parsePort(1, []syscall.NetlinkRouteAttr{
		attr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(3)),
		attr(nl.RDMA_NLDEV_ATTR_PORT_STATE, []byte{4}),
		attr(nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE, []byte{5}),
		attr(nldevAttrNdevIndex, ndev),
		attr(nldevAttrNdevName, []byte("net1\x00")),
	})
	want := netlinkPort{Port: sysfs.Port{Num: 1, State: sysfs.PortState{Num: 4, Name: "ACTIVE"},
		PhysState: sysfs.PhysState{Num: 5, Name: "LinkUp"}}, ndevIndex: 7, ndevName: "net1"}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(netlinkPort{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !got.Active() {
		t.Error("4/5 is not Active")
	}
	// A port whose netdev is in another netns: the kernel leaves the
	// netdev out, and the port is bound to nothing here.
	got, err = parsePort(2, []syscall.NetlinkRouteAttr{
		attr(nl.RDMA_NLDEV_ATTR_PORT_STATE, []byte{1}), attr(nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE, []byte{3})})
	if err != nil || got.ndevIndex != 0 || got.State.Name != "DOWN" || got.PhysState.Name != "Disabled" {
		t.Errorf("port without netdev = %+v, %v", got, err)
	}
	for name, attrs := range map[string][]syscall.NetlinkRouteAttr{
		"no state":          {attr(nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE, []byte{5})},
		"empty state":       {attr(nl.RDMA_NLDEV_ATTR_PORT_STATE, nil), attr(nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE, []byte{5})},
		"short netdev":      {attr(nl.RDMA_NLDEV_ATTR_PORT_STATE, []byte{4}), attr(nldevAttrNdevIndex, []byte{1})},
		"nothing at all":    nil,
		"physical only gap": {attr(nl.RDMA_NLDEV_ATTR_PORT_STATE, []byte{4})},
	} {
		if _, err := parsePort(1, attrs); err == nil {
			t.Errorf("%s: parsePort accepted it", name)
		}
	}
}

func TestLinkLayer(t *testing.T) {
	for _, tc := range []struct {
		proto string
		ipoib bool
		want  string
	}{
		{"ib", false, "InfiniBand"}, {"roce", true, "Ethernet"}, {"iw", false, "Ethernet"},
		{"", true, "InfiniBand"}, {"", false, "Ethernet"}, {"opa", false, "Unknown"},
	} {
		if got := linkLayer(tc.proto, tc.ipoib); got != tc.want {
			t.Errorf("linkLayer(%q, %v) = %q, want %q", tc.proto, tc.ipoib, got, tc.want)
		}
	}
}

// node is one PF with an RDMA device and two VFs with theirs, as the
// host's sysfs shows them in shared mode.
func node(t testing.TB) (*sysfstest.Tree, string, string, string) {
	const pf, vf0, vf1 = "0000:18:00.0", "0000:18:00.2", "0000:18:00.3"
	tree := sysfstest.New(t)
	tree.AddPF(pf, 8, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_0", NodeGUID: "a088:c203:0018:1000"}})
	tree.AddVF(pf, 0, vf0, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_10", NodeGUID: "a288:c2ff:fe18:0000",
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0("a288:c2ff:fe18:0100")}}}})
	tree.AddVF(pf, 1, vf1, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_11", NodeGUID: "a288:c2ff:fe18:0001"}})
	return tree, pf, vf0, vf1
}

func TestFindInHostSysfs(t *testing.T) {
	tree, pf, vf0, _ := node(t)
	l, err := Finder{Sys: sysfs.Reader{Root: tree.Root}}.Find(VF{PCI: vf0, PF: pf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Devices) != 1 {
		t.Fatalf("found %d devices, want 1: %+v", len(l.Devices), l.Devices)
	}
	d := l.Devices[0]
	if d.Name != "mlx5_10" || d.Source != HostSysfs || d.Netns != "" || d.NodeGUID.String() != "a288:c2ff:fe18:0000" ||
		d.Ports[0].GUID.String() != "a288:c2ff:fe18:0100" || !d.Ports[0].Active() || d.Ports[0].LinkLayer != "InfiniBand" {
		t.Errorf("device = %+v", d)
	}
	if l.Missing() != "" || l.Root() != tree.Root {
		t.Errorf("Missing() = %q, Root() = %q", l.Missing(), l.Root())
	}
	// Refresh reads the same place again: a port going down shows.
	tree.SetPort(vf0, "mlx5_10", 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	if p := l.Devices[0].Ports[0]; p.Active() || p.State.Num != 1 {
		t.Errorf("after the port went down, Refresh reads %+v", p)
	}
	tree.HideRDMA(vf0, "mlx5_10")
	if err := l.Refresh(); err == nil || !strings.Contains(err.Error(), "gone from host-sysfs") {
		t.Errorf("Refresh after the device left the host view: %v", err)
	}
}

// TestFindNeverSkips covers the rule without root or a netns: a VF whose
// device is not in the host's view (RDMA netns exclusive mode moved it into
// the pod) is a VF without device only when nothing says it has one.
func TestFindNeverSkips(t *testing.T) {
	tree, pf, vf0, _ := node(t)
	tree.HideRDMA(vf0, "mlx5_10") // the exclusive-mode host view
	hostDir := filepath.Join(tree.Root, "bus/pci/devices", vf0, "infiniband")
	if entries, err := os.ReadDir(hostDir); err != nil || len(entries) != 0 {
		t.Fatalf("the fixture's exclusive-mode view: %s holds %v (%v), want an empty directory", hostDir, entries, err)
	}
	f := Finder{Sys: sysfs.Reader{Root: tree.Root}}
	for _, tc := range []struct {
		name    string
		vf      VF
		capable string // "" = not RDMA-capable: Missing says nothing
		looked  []string
	}{
		{name: "PF has an RDMA device", vf: VF{PCI: vf0, PF: pf, IfIndex: 9},
			capable: "its PF " + pf + " has RDMA device mlx5_0",
			looked: []string{"host sysfs " + hostDir + ": empty",
				"RDMA netlink: not asked, ib_core is not loaded (no " + filepath.Join(tree.Root, "module/ib_core") + ")"}},
		{name: "netdev not known", vf: VF{PCI: vf0, PF: pf}, capable: "its PF " + pf + " has RDMA device mlx5_0",
			looked: []string{"host sysfs " + hostDir + ": empty", "RDMA netlink: not asked, the VF's netdev is not known"}},
		{name: "IPoIB netdev", vf: VF{PCI: vf0, IPoIB: true}, capable: "its netdev is IPoIB"},
		{name: "InfiniBand configured", vf: VF{PCI: vf0, WantInfiniBand: true}, capable: "the configuration asks for linkLayer infiniband"},
		{name: "nothing says RDMA", vf: VF{PCI: vf0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := f.Find(tc.vf)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Devices) != 0 {
				t.Fatalf("found %+v", l.Devices)
			}
			if !strings.HasPrefix(l.Capable, tc.capable) || (tc.capable == "") != (l.Capable == "") {
				t.Errorf("Capable = %q, want %q", l.Capable, tc.capable)
			}
			if tc.looked != nil {
				if diff := cmp.Diff(tc.looked, l.Looked); diff != "" {
					t.Errorf("Looked (-want +got):\n%s", diff)
				}
			}
			missing := l.Missing()
			if tc.capable == "" {
				if missing != "" {
					t.Errorf("Missing() = %q for a VF nothing says has RDMA", missing)
				}
				return
			}
			for _, s := range append([]string{"no RDMA device of it found", tc.capable, hostDir}, tc.looked...) {
				if !strings.Contains(missing, s) {
					t.Errorf("Missing() does not say %q: %s", s, missing)
				}
			}
		})
	}
	// A PF whose device is gone too leaves nothing that says RDMA.
	tree.HideRDMA(pf, "mlx5_0")
	if l, _ := f.Find(VF{PCI: vf0, PF: pf, IfIndex: 9}); l.Capable != "" || l.Missing() != "" {
		t.Errorf("without any RDMA device: Capable %q, Missing %q", l.Capable, l.Missing())
	}
}

func TestExclusiveMode(t *testing.T) {
	tree, _, _, _ := node(t)
	f := Finder{Sys: sysfs.Reader{Root: tree.Root}}
	if f.ExclusiveMode() {
		t.Error("exclusive mode without ib_core")
	}
	dir := filepath.Join(tree.Root, "module", "ib_core", "parameters")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]bool{"Y": false, "N": true} {
		tree.WriteFile(filepath.Join(dir, "netns_mode"), value)
		if got := f.ExclusiveMode(); got != want {
			t.Errorf("netns_mode %s: ExclusiveMode() = %v, want %v", value, got, want)
		}
	}
	if !f.ibCoreLoaded() {
		t.Error("ib_core not seen as loaded with module/ib_core present")
	}
}
