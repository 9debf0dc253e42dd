// Package sysfs reads the host facts about a VF that the kernel publishes in
// sysfs: its PF and index, its RDMA devices, their GUIDs and port states.
// Everything is read under a configurable root so a container can mount the
// host's sysfs elsewhere and tests can lay out a fixture tree.
package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// ErrNoDevice reports a PCI address with no device under the sysfs root.
var ErrNoDevice = errors.New("no such PCI device")

// Reader reads sysfs under Root (normally "/sys").
type Reader struct {
	Root string
}

// VF is what sysfs says about one virtual function (or any PCI network
// function when it has no PF).
type VF struct {
	PCI   string
	PF    string // "" when the device has no physfn link
	Index int    // index among the PF's virtfnN links, -1 without a PF
	RDMA  []RDMADevice
}

// RDMADevice is one entry of <pci>/infiniband/.
type RDMADevice struct {
	Name     string
	PCI      string
	NodeGUID GUID
	// SysImageGUID is the NIC's system image GUID (a VF reports its
	// card's); 0 when the device has none or it could not be read.
	SysImageGUID GUID
	Ports        []Port
}

// Port is one entry of <rdma>/ports/.
type Port struct {
	Num       int
	State     PortState
	PhysState PhysState
	LinkLayer string // "InfiniBand" or "Ethernet" as the kernel writes it
	// GUID is the port GUID: the interface ID of GID 0 (gids/0, after the
	// subnet prefix); 0 when GID 0 is unset or could not be read (the
	// kernel shows an unset entry as all zeros).
	GUID GUID
}

// Active reports whether the port can pass traffic: logical state ACTIVE
// and physical state LinkUp.
func (p Port) Active() bool {
	return p.State.Num == PortActive && p.PhysState.Num == PhysLinkUp
}

func (r Reader) pciPath(addr string, elem ...string) string {
	return filepath.Join(append([]string{r.Root, "bus", "pci", "devices", addr}, elem...)...)
}

// PCIPath returns the path of a PCI device's sysfs entry, elements appended.
func (r Reader) PCIPath(addr string, elem ...string) string { return r.pciPath(addr, elem...) }

// ReadVF collects the facts about the PCI function addr. A device without an
// infiniband/ directory is a plain netdev VF: RDMA is empty, not an error.
// RDMA is only what the host's sysfs shows: in RDMA netns exclusive mode a
// VF's device may live in its pod's netns (package rdma looks there).
func (r Reader) ReadVF(addr string) (*VF, error) {
	vf, err := r.ReadFunction(addr)
	if err != nil {
		return nil, err
	}
	if vf.RDMA, err = r.RDMADevices(addr); err != nil {
		return nil, err
	}
	return vf, nil
}

// ReadFunction is ReadVF without the RDMA devices: the PF and the index.
func (r Reader) ReadFunction(addr string) (*VF, error) {
	path := r.pciPath(addr)
	switch _, err := os.Stat(path); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s under %s: %w", addr, filepath.Join(r.Root, "bus/pci/devices"), ErrNoDevice)
	case err != nil:
		return nil, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	vf := &VF{PCI: addr, Index: -1}
	switch pf, err := readlinkBase(filepath.Join(path, "physfn")); {
	case err == nil:
		vf.PF = pf
		if vf.Index, err = r.vfIndex(path, pf, addr); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read physfn of %s: %w", addr, err)
	}
	return vf, nil
}

// FWVer is the firmware version RDMA device name of PCI function addr
// reports; "" and no error when the device has no fw_ver. A file that is
// there and cannot be read (not a regular file, as an attribute of a wedged
// device can be made to look in a fixture) is an error for the doctor to
// report. ADD and CHECK do not need it, so ReadVF and RDMADevices leave it
// out.
// Equivalent to: cat $root/bus/pci/devices/$addr/infiniband/$name/fw_ver
func (r Reader) FWVer(addr, name string) (string, error) {
	v, err := ReadAttr(r.pciPath(addr, "infiniband", name, "fw_ver"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read fw_ver of %s (%s): %w", name, addr, err)
	}
	return v, nil
}

// readlinkBase returns the last element of the target of the symlink path.
// Equivalent to: basename "$(readlink $path)"
func readlinkBase(path string) (string, error) {
	target, err := os.Readlink(path)
	if err != nil {
		return "", err
	}
	return filepath.Base(target), nil
}

// vfIndex finds N such that <pf>/virtfnN points at vf, dev being vf's
// directory. The kernel numbers a PF's virtfn links 0 to sriov_numvfs-1,
// so it reads them in order through dev/physfn and stops at the VF; where
// the numbering has a gap before the VF (trees built by hand), it falls
// back to listing the PF.
func (r Reader) vfIndex(dev, pf, vf string) (int, error) {
	for idx := 0; ; idx++ {
		target, err := readlinkBase(filepath.Join(dev, "physfn", "virtfn"+strconv.Itoa(idx)))
		if err != nil {
			break
		}
		if target == vf {
			return idx, nil
		}
	}
	vfs, err := r.VFs(pf)
	if err != nil {
		return -1, fmt.Errorf("VF %s: %w", vf, err)
	}
	for idx, addr := range vfs {
		if addr == vf {
			return idx, nil
		}
	}
	return -1, fmt.Errorf("PF %s has no virtfnN link to VF %s", pf, vf)
}

// VFs lists a PF's virtual functions by index, from its virtfnN links.
func (r Reader) VFs(pf string) (map[int]string, error) {
	path := r.pciPath(pf)
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read PF %s: %w", pf, err)
	}
	vfs := map[int]string{}
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "virtfn")
		if !ok {
			continue
		}
		idx, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if target, err := readlinkBase(filepath.Join(path, e.Name())); err == nil {
			vfs[idx] = target
		}
	}
	return vfs, nil
}

// RDMADevices reads every RDMA device of a PCI function, sorted by name.
func (r Reader) RDMADevices(addr string) ([]RDMADevice, error) {
	path := r.pciPath(addr, "infiniband")
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read RDMA devices of %s: %w", addr, err)
	}
	devs := make([]RDMADevice, 0, len(entries))
	for _, e := range entries { // sorted by os.ReadDir
		d, err := readRDMA(filepath.Join(path, e.Name()), addr)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// readRDMA reads the RDMA device at path, an entry of addr's infiniband/.
func readRDMA(path, addr string) (RDMADevice, error) {
	name := filepath.Base(path)
	d := RDMADevice{Name: name, PCI: addr}
	raw, err := ReadAttr(filepath.Join(path, "node_guid"))
	if err != nil {
		return d, fmt.Errorf("read node_guid of %s (%s): %w", name, addr, err)
	}
	if d.NodeGUID, err = ParseGUID(raw); err != nil {
		return d, fmt.Errorf("node_guid of %s (%s): %w", name, addr, err)
	}
	if raw, err := ReadAttr(filepath.Join(path, "sys_image_guid")); err == nil {
		d.SysImageGUID, _ = ParseGUID(raw)
	}
	ports := filepath.Join(path, "ports")
	entries, err := os.ReadDir(ports)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("read ports of %s (%s): %w", name, addr, err)
	}
	for _, e := range entries {
		port, err := readPort(ports, e.Name())
		if err != nil {
			return d, fmt.Errorf("port %s of %s (%s): %w", e.Name(), name, addr, err)
		}
		d.Ports = append(d.Ports, port)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
	return d, nil
}

// readPort reads port num of the ports/ directory at dir.
func readPort(dir, num string) (Port, error) {
	var p Port
	n, err := strconv.Atoi(num)
	if err != nil {
		return p, fmt.Errorf("port directory %q is not a number", num)
	}
	p.Num = n
	path := filepath.Join(dir, num)
	raw, err := ReadAttr(filepath.Join(path, "state"))
	if err != nil {
		return p, err
	}
	if p.State, err = ParsePortState(raw); err != nil {
		return p, err
	}
	if raw, err = ReadAttr(filepath.Join(path, "phys_state")); err != nil {
		return p, err
	}
	if p.PhysState, err = ParsePhysState(raw); err != nil {
		return p, err
	}
	if p.LinkLayer, err = ReadAttr(filepath.Join(path, "link_layer")); err != nil {
		return p, err
	}
	if raw, err := ReadAttr(filepath.Join(path, "gids", "0")); err == nil {
		p.GUID, _ = ParseGIDInterfaceID(raw)
	}
	return p, nil
}

// NodeGUIDs maps the node GUID of every RDMA device on the node (from
// class/infiniband) to the PCI functions that carry it.
func (r Reader) NodeGUIDs() (map[GUID][]string, error) {
	idx, err := r.ScanGUIDs()
	if err != nil {
		return nil, err
	}
	out := make(map[GUID][]string, len(idx.GUIDs))
	for _, e := range idx.Entries {
		if g, ok := idx.GUIDs[e.Name]; ok {
			out[g] = append(out[g], r.DevicePCI(e.Name))
		}
	}
	return out, nil
}

// Readable reports whether the root looks like sysfs: bus/pci/devices can
// be listed.
func (r Reader) Readable() error {
	_, err := os.ReadDir(filepath.Join(r.Root, "bus", "pci", "devices"))
	if err != nil {
		return fmt.Errorf("sysfs root %s is not readable: %w", r.Root, err)
	}
	return nil
}

// MaxAttrSize caps the read of one sysfs attribute: a page, all a show()
// method may write. Everything this project reads is a few bytes.
const MaxAttrSize = 4096

// ReadAttr reads one sysfs attribute, without surrounding space. Only a
// regular file is read (not a link in the last element, a FIFO or a device
// node), opened non-blocking and up to MaxAttrSize: a tree that is not the
// kernel's cannot stall or flood the reader (see package safefile).
// Equivalent to: cat $path
func ReadAttr(path string) (string, error) {
	b, err := safefile.ReadFile(path, MaxAttrSize)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
