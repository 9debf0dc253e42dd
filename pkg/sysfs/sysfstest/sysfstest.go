// Package sysfstest builds fixture sysfs trees for tests, laid out as the
// kernel lays out /sys: devices under devices/pci0000:00/, symlinks from
// bus/pci/devices and class/{net,infiniband}, physfn/virtfnN links between
// PF and VFs. It is the only fake in the project: the hardware edge.
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
)

// TB is the part of testing.TB the builder uses, so a non-test program
// (the demo) can build a tree too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
}

// Tree is a fixture sysfs root.
type Tree struct {
	Root string
	tb   TB
}

// Port describes one RDMA port; empty fields get healthy InfiniBand values.
type Port struct {
	State     string // e.g. "4: ACTIVE"
	PhysState string // e.g. "5: LinkUp"
	LinkLayer string // "InfiniBand" or "Ethernet"
	GID0      string // ports/N/gids/0
}

// RDMA describes the infiniband/<Name> directory of a PCI function.
type RDMA struct {
	Name     string // e.g. "mlx5_10"
	NodeGUID string // "xxxx:xxxx:xxxx:xxxx"
	// SysImageGUID is the NIC's system image GUID; "" writes none (a
	// provider that has no such attribute).
	SysImageGUID string
	FWVer        string
	Ports        []Port // port 1, 2, … ; nil means one healthy IB port
}

// Device describes a PCI function.
type Device struct {
	Vendor   string // default "0x15b3" (Mellanox)
	DeviceID string // default "0x101e" for VFs, "0x1021" for PFs (ConnectX-7)
	Driver   string // default "mlx5_core"; "-" for unbound
	NetDev   string // netdev name under net/ when on the host; "" for none
	RDMA     *RDMA
}

// New makes an empty tree in a test temp dir.
func New(tb TB) *Tree {
	tb.Helper()
	t := &Tree{Root: tb.TempDir(), tb: tb}
	for _, d := range []string{"bus/pci/devices", "bus/pci/drivers", "class/net", "class/infiniband", "module"} {
		t.mkdir(d)
	}
	return t
}

// DevicePath is where the device's real directory lives in the tree.
func (t *Tree) DevicePath(addr string) string {
	return filepath.Join(t.Root, "devices", "pci0000:00", addr)
}

// AddPF adds a physical function with sriov_totalvfs and sriov_numvfs.
func (t *Tree) AddPF(addr string, totalVFs int, d Device) {
	t.tb.Helper()
	if d.DeviceID == "" {
		d.DeviceID = "0x1021"
	}
	t.addDevice(addr, d)
	t.WriteFile(filepath.Join(t.DevicePath(addr), "sriov_totalvfs"), fmt.Sprint(totalVFs))
	t.WriteFile(filepath.Join(t.DevicePath(addr), "sriov_numvfs"), "0")
}

// AddVF adds VF number index of pf at addr and links them both ways; it
// bumps the PF's sriov_numvfs.
func (t *Tree) AddVF(pf string, index int, addr string, d Device) {
	t.tb.Helper()
	if d.DeviceID == "" {
		d.DeviceID = "0x101e"
	}
	t.addDevice(addr, d)
	t.symlink(filepath.Join("..", pf), filepath.Join(t.DevicePath(addr), "physfn"))
	t.symlink(filepath.Join("..", addr), filepath.Join(t.DevicePath(pf), fmt.Sprintf("virtfn%d", index)))
	vfs, _ := filepath.Glob(filepath.Join(t.DevicePath(pf), "virtfn*"))
	t.WriteFile(filepath.Join(t.DevicePath(pf), "sriov_numvfs"), fmt.Sprint(len(vfs)))
}

// AddDevice adds a PCI function that is neither PF nor VF.
func (t *Tree) AddDevice(addr string, d Device) {
	t.tb.Helper()
	t.addDevice(addr, d)
}

func (t *Tree) addDevice(addr string, d Device) {
	dir := t.DevicePath(addr)
	t.mkdir(filepath.Join("devices", "pci0000:00", addr))
	if d.Vendor == "" {
		d.Vendor = "0x15b3"
	}
	t.WriteFile(filepath.Join(dir, "vendor"), d.Vendor)
	t.WriteFile(filepath.Join(dir, "device"), d.DeviceID)
	t.symlink(filepath.Join("..", "..", "..", "devices", "pci0000:00", addr), filepath.Join(t.Root, "bus", "pci", "devices", addr))
	if d.Driver == "" {
		d.Driver = "mlx5_core"
	}
	if d.Driver != "-" {
		t.mkdir(filepath.Join("bus", "pci", "drivers", d.Driver))
		t.symlink(filepath.Join("..", "..", "..", "bus", "pci", "drivers", d.Driver), filepath.Join(dir, "driver"))
		drvLink := filepath.Join(t.Root, "bus", "pci", "drivers", d.Driver, addr)
		t.symlink(filepath.Join("..", "..", "..", "..", "devices", "pci0000:00", addr), drvLink)
	}
	if d.NetDev != "" {
		t.SetNetDev(addr, d.NetDev)
	}
	if d.RDMA != nil {
		t.SetRDMA(addr, *d.RDMA)
	}
}

// SetNetDev gives the device a host netdev entry (net/<name> and
// class/net/<name>).
func (t *Tree) SetNetDev(addr, name string) {
	t.tb.Helper()
	rel := filepath.Join("devices", "pci0000:00", addr, "net", name)
	t.mkdir(rel)
	t.WriteFile(filepath.Join(t.Root, rel, "ifindex"), "0")
	t.symlink(filepath.Join("..", "..", rel), filepath.Join(t.Root, "class", "net", name))
	t.SetLinkState(addr, name, false, false)
}

// SetLinkState writes the link state of the device's host netdev name:
// flags (IFF_UP or not, with IFF_BROADCAST and IFF_MULTICAST), carrier and
// operstate as the kernel shows them. The kernel refuses to read carrier
// of a netdev that is down; the fixture says 0.
func (t *Tree) SetLinkState(addr, name string, up, carrier bool) {
	t.tb.Helper()
	dir := filepath.Join(t.DevicePath(addr), "net", name)
	flags, c, oper := "0x1002", "0", "down"
	if up {
		flags = "0x1003"
		if carrier {
			c, oper = "1", "up"
		}
	}
	t.WriteFile(filepath.Join(dir, "flags"), flags)
	t.WriteFile(filepath.Join(dir, "carrier"), c)
	t.WriteFile(filepath.Join(dir, "operstate"), oper)
}

// SetRDMA writes (or rewrites) an RDMA device under the PCI function.
func (t *Tree) SetRDMA(addr string, r RDMA) {
	t.tb.Helper()
	rel := filepath.Join("devices", "pci0000:00", addr, "infiniband", r.Name)
	dir := filepath.Join(t.Root, rel)
	t.mkdir(rel)
	t.WriteFile(filepath.Join(dir, "node_guid"), r.NodeGUID)
	if r.SysImageGUID != "" {
		t.WriteFile(filepath.Join(dir, "sys_image_guid"), r.SysImageGUID)
	}
	if r.FWVer != "" {
		t.WriteFile(filepath.Join(dir, "fw_ver"), r.FWVer)
	}
	ports := r.Ports
	if ports == nil {
		ports = []Port{{}}
	}
	for i, p := range ports {
		t.SetPort(addr, r.Name, i+1, p)
	}
	classLink := filepath.Join(t.Root, "class", "infiniband", r.Name)
	if _, err := os.Lstat(classLink); err != nil {
		t.symlink(filepath.Join("..", "..", rel), classLink)
		t.symlink(filepath.Join("..", "..", "..", addr), filepath.Join(dir, "device"))
	}
}

// ReprobeRDMA replaces an RDMA device with a new one, as an unbind/bind of
// the PCI function does: every file and link of it is created anew (new
// inode numbers). That is how a new node GUID set through the PF reaches a
// VF on real hardware; SetRDMA on an existing device changes it in place.
func (t *Tree) ReprobeRDMA(addr string, r RDMA) {
	t.tb.Helper()
	// The old class entry is kept under another name until the new one
	// exists, so that even a file system that reuses freed inode numbers
	// (ext4) gives the new entry a number of its own, as sysfs does.
	classLink := filepath.Join(t.Root, "class", "infiniband", r.Name)
	old := classLink + ".removed"
	if err := os.Rename(classLink, old); err != nil {
		t.tb.Fatalf("sysfstest: reprobe %s: %v", r.Name, err)
	}
	t.remove(t.RDMAPath(addr, r.Name))
	t.SetRDMA(addr, r)
	t.remove(old)
}

// SetPort writes one port's state files; empty fields get healthy IB values.
// state is written last, as the kernel orders a port's change: its
// physical state reaches LinkUp before the logical state leaves DOWN, and
// a watcher that re-reads state alone (sysfs.OpenPolled) relies on that.
func (t *Tree) SetPort(addr, rdma string, num int, p Port) {
	t.tb.Helper()
	if p.State == "" {
		p.State = "4: ACTIVE"
	}
	if p.PhysState == "" {
		p.PhysState = "5: LinkUp"
	}
	if p.LinkLayer == "" {
		p.LinkLayer = "InfiniBand"
	}
	if p.GID0 == "" {
		p.GID0 = "fe80:0000:0000:0000:0000:0000:0000:0000"
	}
	dir := filepath.Join(t.DevicePath(addr), "infiniband", rdma, "ports", fmt.Sprint(num))
	t.mkdirAbs(filepath.Join(dir, "gids"))
	t.WriteFile(filepath.Join(dir, "phys_state"), p.PhysState)
	t.WriteFile(filepath.Join(dir, "link_layer"), p.LinkLayer)
	t.WriteFile(filepath.Join(dir, "gids", "0"), p.GID0)
	t.WriteFile(filepath.Join(dir, "state"), p.State)
}

// LoadModule marks a kernel module as loaded (module/<name>/).
func (t *Tree) LoadModule(name string) {
	t.tb.Helper()
	t.mkdir(filepath.Join("module", name))
}

// WriteFile writes a sysfs attribute with the trailing newline the kernel adds.
func (t *Tree) WriteFile(path, value string) {
	t.tb.Helper()
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		t.tb.Fatalf("sysfstest: %v", err)
	}
}

func (t *Tree) mkdir(rel string) {
	t.tb.Helper()
	t.mkdirAbs(filepath.Join(t.Root, rel))
}

func (t *Tree) mkdirAbs(dir string) {
	t.tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.tb.Fatalf("sysfstest: %v", err)
	}
}

func (t *Tree) symlink(target, link string) {
	t.tb.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.tb.Fatalf("sysfstest: %v", err)
	}
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		t.tb.Fatalf("sysfstest: %v", err)
	}
}
