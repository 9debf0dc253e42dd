package hostconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// dgxPF is one ConnectX-7 port of the DGX H200 fixture.
type dgxPF struct {
	pci    string
	netdev string
	rdma   string
	guid   sysfs.GUID
	offset int
}

// dgxH200 is the seed's node: four dual-port ConnectX-7 cards on buses
// 18, 40, 9a and c0, each port its own PF with one InfiniBand port, burned-in
// GUIDs b8:3f:d2:03:00:<serial> (the two ports of a card consecutive), and
// NUM_OF_VFS=16, so port 0's VFs start at function 2 (offset 2) and port
// 1's after port 0's sixteen (offset 17).
func dgxH200() []dgxPF {
	cards := []struct {
		bus    int
		serial uint64
	}{{0x18, 0x5a1b20}, {0x40, 0x5a1c88}, {0x9a, 0x6e0f10}, {0xc0, 0x6e0f4c}}
	var pfs []dgxPF
	for c, card := range cards {
		for fn := 0; fn < 2; fn++ {
			pfs = append(pfs, dgxPF{
				pci:    fmt.Sprintf("0000:%02x:00.%d", card.bus, fn),
				netdev: fmt.Sprintf("ibp%ds0f%d", card.bus, fn),
				rdma:   fmt.Sprintf("mlx5_%d", 2*c+fn),
				guid:   sysfs.GUID(0xb83fd2_0300_000000 | (card.serial + uint64(fn))),
				offset: 2 + 15*fn,
			})
		}
	}
	return pfs
}

// newDGXBoot lays out a DGX H200 node as the unit finds it at boot: drivers
// loaded and bound, PFs up with their IPoIB netdevs, no VFs yet. Next to
// the eight ConnectX-7 PFs sit the GPUs and a BlueField-3 (another device
// ID, in Ethernet mode) that a ConnectX-7 match rule must leave out.
func newDGXBoot(t testing.TB) *kernel {
	t.Helper()
	k := newKernel(t)
	for _, m := range []string{"mlx5_core", "mlx5_ib", "ib_ipoib"} {
		k.tree.LoadModule(m)
	}
	for _, pf := range dgxH200() {
		k.addPF(&kpf{pci: pf.pci, ib: true, vfDriver: "mlx5_core", offset: pf.offset, stride: 1}, 16, sysfstest.Device{
			DeviceID: "0x1021",
			NetDev:   pf.netdev,
			RDMA: &sysfstest.RDMA{Name: pf.rdma, NodeGUID: pf.guid.String(), FWVer: "28.43.1014",
				Ports: []sysfstest.Port{{GID0: sysfstest.GID0(pf.guid.String())}}},
		})
	}
	for _, gpu := range []string{"0000:1b:00.0", "0000:43:00.0", "0000:9d:00.0", "0000:c3:00.0"} {
		k.tree.AddDevice(gpu, sysfstest.Device{Vendor: "0x10de", DeviceID: "0x2335", Driver: "nvidia"})
	}
	k.tree.AddPF("0000:ba:00.0", 16, sysfstest.Device{
		DeviceID: "0xa2dc",
		NetDev:   "enp186s0f0np0",
		RDMA: &sysfstest.RDMA{Name: "mlx5_8", NodeGUID: "b83f:d203:0077:1100",
			Ports: []sysfstest.Port{{LinkLayer: "Ethernet", GID0: "fe80:0000:0000:0000:ba3f:d2ff:fe77:1100"}}},
	})
	k.tree.WriteFile(filepath.Join(k.tree.DevicePath("0000:ba:00.0"), "sriov_offset"), "2")
	k.tree.WriteFile(filepath.Join(k.tree.DevicePath("0000:ba:00.0"), "sriov_stride"), "1")
	return k
}

// newIGBBoot lays out the QEMU lab's guest: one emulated Intel 82576 PF
// (igb, Ethernet, no RDMA device) with 7 VFs possible at offset 0x80,
// stride 2, so they land on 01:10.0, 01:10.2, ... as LAB.md reports.
func newIGBBoot(t testing.TB) *kernel {
	t.Helper()
	k := newKernel(t)
	k.tree.LoadModule("igb")
	k.tree.LoadModule("igbvf")
	k.addPF(&kpf{pci: "0000:01:00.0", vfDriver: "igbvf", offset: 0x80, stride: 2}, 7, sysfstest.Device{
		Vendor: "0x8086", DeviceID: "0x10c9", Driver: "igb", NetDev: "enp1s0",
	})
	return k
}

// readSpec parses a spec from testdata.
func readSpec(t testing.TB, name string) *Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return spec
}

func mustParse(t testing.TB, yaml string) *Spec {
	t.Helper()
	spec, err := ParseSpec([]byte(yaml))
	if err != nil {
		t.Fatalf("ParseSpec: %v\n%s", err, yaml)
	}
	return spec
}

func mustResolve(t testing.TB, spec *Spec, root string) *Plan {
	t.Helper()
	p, err := Resolve(spec, root)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return p
}

// bringUp puts the node in the state the boot unit leaves it in, by the
// plan and without Apply: VFs created and bound with the derived
// GUIDs, named, PFs and VFs with their altnames. Check tests start from it.
func bringUp(t testing.TB, k *kernel, p *Plan) {
	t.Helper()
	k.locked(func() {
		for _, pf := range p.PFs {
			if pf.AltName != "" {
				if err := os.WriteFile(filepath.Join(k.state, "alt", pf.AltName), []byte(pf.PCI), 0o644); err != nil {
					panic(err.Error())
				}
			}
			kp := k.pf(pf.PCI)
			k.tree.WriteFile(filepath.Join(k.tree.DevicePath(pf.PCI), "sriov_numvfs"), fmt.Sprint(pf.NumVFs))
			k.setNumVFs(kp, pf.NumVFs)
			for _, vf := range pf.VFs {
				if kp.ib && pf.GUIDs == GUIDPFDerived {
					pfGUID, err := node{root: k.root()}.pfGUID(pf.PCI)
					if err != nil {
						panic(err.Error())
					}
					g, err := DeriveVFGUIDs(pfGUID, vf.Index)
					if err != nil {
						panic(err.Error())
					}
					k.setVFGUIDsLocked(vf.PCI, g)
				}
				for _, name := range listDir(filepath.Join(k.tree.DevicePath(vf.PCI), "net")) {
					k.tree.RenameNetDev(vf.PCI, name, vf.Name)
				}
				if err := os.WriteFile(filepath.Join(k.state, "alt", vf.AltName), []byte(vf.PCI), 0o644); err != nil {
					panic(err.Error())
				}
			}
		}
	})
	for _, f := range k.failures {
		t.Fatalf("bring up: %s", f)
	}
}

func (k *kernel) setVFGUIDsLocked(vf string, g VFGUIDs) {
	dir := filepath.Join(k.tree.DevicePath(vf), "infiniband")
	names := listDir(dir)
	if len(names) != 1 {
		panic(fmt.Sprintf("VF %s has RDMA devices %v", vf, names))
	}
	k.tree.WriteFile(filepath.Join(dir, names[0], "node_guid"), g.Node.String())
	k.tree.WriteFile(filepath.Join(dir, names[0], "ports", "1", "gids", "0"), sysfstest.GID0(g.Port.String()))
}
