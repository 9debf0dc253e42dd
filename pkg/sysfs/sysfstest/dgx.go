package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
)

// DGX H200 compute fabric as the tests model it: four dual-port ConnectX-7
// cards, each port its own PCI physical function with one InfiniBand port,
// eight VFs per PF.
const (
	DGXCards      = 4
	DGXPFsPerCard = 2
	DGXVFsPerPF   = 8
	DGXTotalVFs   = 16 // sriov_totalvfs as NUM_OF_VFS=16 in mlxconfig leaves it
	// DGXFirmware is a ConnectX-7 firmware at the project's minimum.
	DGXFirmware = "28.43.1014"
)

// dgxCardBuses are the PCI buses of the four cards, as on a DGX H200's
// PCIe switches.
var dgxCardBuses = [DGXCards]int{0x18, 0x40, 0x9a, 0xc0}

// DGXNode is a fixture tree laid out like a healthy DGX H200 node's sysfs,
// with the addresses and names of what it holds so a test can break them.
type DGXNode struct {
	*Tree
	PFs []DGXPF
}

// DGXPF is one ConnectX-7 physical function of the fixture.
type DGXPF struct {
	PCI      string // e.g. "0000:18:00.0"
	RDMA     string // e.g. "mlx5_0"
	NetDev   string // host IPoIB netdev, e.g. "ibp24s0f0"
	NodeGUID string
	// SysImageGUID is the card's: both PFs of a card and their VFs
	// report it.
	SysImageGUID string
	VFs          []DGXVF
}

// DGXVF is one VF of the fixture, present on the host with its netdev.
type DGXVF struct {
	PCI      string
	Index    int
	RDMA     string
	NetDev   string // e.g. "ibp24s0f0v3", the systemd predictable name
	NodeGUID string
	PortGUID string
}

// NewDGXH200 builds a healthy DGX H200 node: mlx5_core loaded and bound to
// every PF, firmware DGXFirmware, every IB port ACTIVE/LinkUp, sriov_numvfs
// DGXVFsPerPF of DGXTotalVFs, unique non-zero node and port GUIDs, and the
// node's GPUs as non-Mellanox PCI functions the checks must ignore.
func NewDGXH200(tb TB) *DGXNode {
	tb.Helper()
	n := &DGXNode{Tree: New(tb)}
	n.LoadModule("mlx5_core")
	n.LoadModule("mlx5_ib")
	for card, bus := range dgxCardBuses {
		for fn := 0; fn < DGXPFsPerCard; fn++ {
			pfNum := card*DGXPFsPerCard + fn
			pf := DGXPF{
				PCI:          fmt.Sprintf("0000:%02x:00.%d", bus, fn),
				RDMA:         fmt.Sprintf("mlx5_%d", pfNum),
				NetDev:       fmt.Sprintf("ibp%ds0f%d", bus, fn),
				NodeGUID:     fmt.Sprintf("a088:c203:00%02x:%04x", bus, 0x1000+fn),
				SysImageGUID: fmt.Sprintf("a088:c203:00%02x:1000", bus),
			}
			n.AddPF(pf.PCI, DGXTotalVFs, Device{
				NetDev: pf.NetDev,
				RDMA: &RDMA{Name: pf.RDMA, NodeGUID: pf.NodeGUID, SysImageGUID: pf.SysImageGUID, FWVer: DGXFirmware,
					Ports: []Port{{GID0: GID0(pf.NodeGUID)}}},
			})
			n.PFs = append(n.PFs, pf)
		}
	}
	rdma := len(n.PFs) // VF RDMA devices are numbered after the PFs'
	for p := range n.PFs {
		pf := &n.PFs[p]
		bus, fn := dgxCardBuses[p/DGXPFsPerCard], p%DGXPFsPerCard
		for i := 0; i < DGXVFsPerPF; i++ {
			// mlx5 places a PF's VFs right after the card's PFs in ARI
			// function numbering: PF .0 gets functions 2..9, PF .1 10..17.
			devfn := DGXPFsPerCard + fn*DGXVFsPerPF + i
			guid := fmt.Sprintf("a288:c2ff:fe%02x:%02x%02x", bus, fn, i)
			vf := DGXVF{
				PCI:      fmt.Sprintf("0000:%02x:%02x.%d", bus, devfn>>3, devfn&7),
				Index:    i,
				RDMA:     fmt.Sprintf("mlx5_%d", rdma),
				NetDev:   fmt.Sprintf("ibp%ds0f%dv%d", bus, fn, i),
				NodeGUID: guid,
				PortGUID: guid,
			}
			rdma++
			n.AddVF(pf.PCI, i, vf.PCI, Device{
				NetDev: vf.NetDev,
				RDMA: &RDMA{Name: vf.RDMA, NodeGUID: vf.NodeGUID, SysImageGUID: pf.SysImageGUID, FWVer: DGXFirmware,
					Ports: []Port{{GID0: GID0(vf.PortGUID)}}},
			})
			pf.VFs = append(pf.VFs, vf)
		}
	}
	for _, addr := range []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"} {
		n.AddDevice(addr, Device{Vendor: "0x10de", DeviceID: "0x2335", Driver: "nvidia"})
	}
	return n
}

// GID0 is the ports/N/gids/0 value of an IB port with the default subnet
// prefix and the given port GUID ("xxxx:xxxx:xxxx:xxxx").
func GID0(portGUID string) string {
	return "fe80:0000:0000:0000:" + portGUID
}

// RDMAPath is the directory of an RDMA device under its PCI function.
func (t *Tree) RDMAPath(addr, rdma string) string {
	return filepath.Join(t.DevicePath(addr), "infiniband", rdma)
}

// RemoveNetDev removes a host netdev entry, as the host's sysfs shows it
// once the netdev moved into a pod's network namespace.
func (t *Tree) RemoveNetDev(addr, name string) {
	t.tb.Helper()
	t.remove(filepath.Join(t.DevicePath(addr), "net", name))
	t.remove(filepath.Join(t.Root, "class", "net", name))
}

// HideRDMA makes the host's view of an RDMA device the one RDMA netns
// exclusive mode gives once the device moved into a pod's netns (rdma-cni,
// ib-sriov-cni's rdmaIsolation): the function's infiniband/ directory
// stays, empty, and class/infiniband no longer lists the device. SetRDMA
// brings it back.
func (t *Tree) HideRDMA(addr, rdma string) {
	t.tb.Helper()
	t.remove(t.RDMAPath(addr, rdma))
	t.remove(filepath.Join(t.Root, "class", "infiniband", rdma))
}

// RenameNetDev renames a host netdev entry.
func (t *Tree) RenameNetDev(addr, from, to string) {
	t.tb.Helper()
	t.RemoveNetDev(addr, from)
	t.SetNetDev(addr, to)
}

// Unbind detaches a PCI function from its driver.
func (t *Tree) Unbind(addr string) {
	t.tb.Helper()
	target, err := os.Readlink(filepath.Join(t.DevicePath(addr), "driver"))
	if err != nil {
		t.tb.Fatalf("sysfstest: %s has no driver to unbind: %v", addr, err)
	}
	t.remove(filepath.Join(t.Root, "bus", "pci", "drivers", filepath.Base(target), addr))
	t.remove(filepath.Join(t.DevicePath(addr), "driver"))
}

// SetNumVFs lowers PF number pf of the node to count VFs: the VFs from
// index count on disappear with their links, as after
// "echo count > sriov_numvfs".
func (n *DGXNode) SetNumVFs(pf, count int) {
	n.tb.Helper()
	p := &n.PFs[pf]
	for _, vf := range p.VFs[count:] {
		n.remove(filepath.Join(n.DevicePath(p.PCI), fmt.Sprintf("virtfn%d", vf.Index)))
		n.remove(filepath.Join(n.Root, "bus", "pci", "devices", vf.PCI))
		n.remove(filepath.Join(n.Root, "bus", "pci", "drivers", "mlx5_core", vf.PCI))
		n.remove(filepath.Join(n.Root, "class", "net", vf.NetDev))
		n.remove(filepath.Join(n.Root, "class", "infiniband", vf.RDMA))
		n.remove(n.DevicePath(vf.PCI))
	}
	p.VFs = p.VFs[:count]
	n.WriteFile(filepath.Join(n.DevicePath(p.PCI), "sriov_numvfs"), fmt.Sprint(count))
}

func (t *Tree) remove(path string) {
	t.tb.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.tb.Fatalf("sysfstest: %v", err)
	}
}
