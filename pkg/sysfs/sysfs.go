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

	"golang.org/x/sys/unix"
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
	Ports    []Port
}

// Port is one entry of <rdma>/ports/.
type Port struct {
	Num       int
	State     PortState
	PhysState PhysState
	LinkLayer string // "InfiniBand" or "Ethernet" as the kernel writes it
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
//
// Every read after the first is relative to the device's directory: on a
// node, bus/pci/devices/<addr> is a symlink into a PCIe hierarchy several
// bridges deep, and a full path would walk (and revalidate in kernfs) all of
// it again for each of the dozen attributes ADD reads.
func (r Reader) ReadVF(addr string) (*VF, error) {
	path := r.pciPath(addr)
	dev, err := openRetry(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY)
	if err == unix.ENOENT {
		return nil, fmt.Errorf("%s under %s: %w", addr, filepath.Join(r.Root, "bus/pci/devices"), ErrNoDevice)
	}
	if err != nil {
		return nil, fmt.Errorf("read PCI device %s: %w", addr, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(dev)
	vf := &VF{PCI: addr, Index: -1}
	switch pf, err := readlinkBase(dev, "physfn"); {
	case err == nil:
		vf.PF = pf
		if vf.Index, err = r.vfIndex(dev, pf, addr); err != nil {
			return nil, err
		}
	case err != unix.ENOENT:
		return nil, fmt.Errorf("read physfn of %s: %w", addr, &fs.PathError{Op: "readlink", Path: filepath.Join(path, "physfn"), Err: err})
	}
	rdma, err := rdmaDevicesAt(dev, "infiniband", filepath.Join(path, "infiniband"), addr)
	if err != nil {
		return nil, err
	}
	vf.RDMA = rdma
	return vf, nil
}

// FWVer is the firmware version RDMA device name of PCI function addr
// reports, "" when it cannot be read. ADD and CHECK do not need it, so
// ReadVF and RDMADevices leave it out.
// Equivalent to: cat $root/bus/pci/devices/$addr/infiniband/$name/fw_ver
func (r Reader) FWVer(addr, name string) string {
	v, _ := readTrim(r.pciPath(addr, "infiniband", name, "fw_ver"))
	return v
}

// readlinkBase returns the last element of the target of the symlink path,
// relative to dir.
// Equivalent to: basename "$(readlink $path)"
func readlinkBase(dir int, path string) (string, error) {
	var buf [unix.PathMax]byte // a link's target is never longer
	for {
		n, err := unix.Readlinkat(dir, path, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		return filepath.Base(string(buf[:n])), nil
	}
}

// vfIndex finds N such that <pf>/virtfnN points at vf, dev being vf's
// directory. The kernel numbers a PF's virtfn links 0 to sriov_numvfs-1,
// so it reads them in order through dev/physfn and stops at the VF; where
// the numbering has a gap before the VF (trees built by hand), it falls
// back to listing the PF.
func (r Reader) vfIndex(dev int, pf, vf string) (int, error) {
	for idx := 0; ; idx++ {
		target, err := readlinkBase(dev, "physfn/virtfn"+strconv.Itoa(idx))
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
	dir, err := openRetry(unix.AT_FDCWD, path, unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("read PF %s: %w", pf, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(dir)
	entries, err := readDirNames(dir)
	if err != nil {
		return nil, fmt.Errorf("read PF %s: %w", pf, &fs.PathError{Op: "readdirent", Path: path, Err: err})
	}
	vfs := map[int]string{}
	for _, name := range entries {
		n, ok := strings.CutPrefix(name, "virtfn")
		if !ok {
			continue
		}
		idx, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if target, err := readlinkBase(dir, name); err == nil {
			vfs[idx] = target
		}
	}
	return vfs, nil
}

// RDMADevices reads every RDMA device of a PCI function, sorted by name.
func (r Reader) RDMADevices(addr string) ([]RDMADevice, error) {
	path := r.pciPath(addr, "infiniband")
	return rdmaDevicesAt(unix.AT_FDCWD, path, path, addr)
}

// rdmaDevicesAt reads the RDMA devices in the infiniband/ directory rel of
// dir, each attribute relative to it. Errors name path, its full path.
func rdmaDevicesAt(dir int, rel, path, addr string) ([]RDMADevice, error) {
	ib, err := openRetry(dir, rel, unix.O_DIRECTORY)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read RDMA devices of %s: %w", addr, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(ib)
	names, err := readDirNames(ib)
	if err != nil {
		return nil, fmt.Errorf("read RDMA devices of %s: %w", addr, &fs.PathError{Op: "readdirent", Path: path, Err: err})
	}
	devs := make([]RDMADevice, 0, len(names))
	for _, name := range names { // sorted by readDirNames
		d, err := readRDMA(ib, path, addr, name)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// readRDMA reads the RDMA device name of ib, the open infiniband/
// directory at path.
func readRDMA(ib int, path, addr, name string) (RDMADevice, error) {
	d := RDMADevice{Name: name, PCI: addr}
	var buf [4096]byte // a sysfs attribute is at most a page
	raw, err := readAt(ib, name+"/node_guid", buf[:])
	if err != nil {
		return d, fmt.Errorf("read node_guid of %s (%s): %w", name, addr, under(path, err))
	}
	if d.NodeGUID, err = ParseGUID(raw); err != nil {
		return d, fmt.Errorf("node_guid of %s (%s): %w", name, addr, err)
	}
	ports, err := openRetry(ib, name+"/ports", unix.O_DIRECTORY)
	if err == unix.ENOENT {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("read ports of %s (%s): %w", name, addr, &fs.PathError{Op: "open", Path: filepath.Join(path, name, "ports"), Err: err})
	}
	defer unix.Close(ports)
	nums, err := readDirNames(ports)
	if err != nil {
		return d, fmt.Errorf("read ports of %s (%s): %w", name, addr, &fs.PathError{Op: "readdirent", Path: filepath.Join(path, name, "ports"), Err: err})
	}
	for _, p := range nums {
		port, err := readPort(ports, p, buf[:])
		if err != nil {
			return d, fmt.Errorf("port %s of %s (%s): %w", p, name, addr, under(filepath.Join(path, name, "ports"), err))
		}
		d.Ports = append(d.Ports, port)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
	return d, nil
}

// readPort reads port num of ports, an open ports/ directory.
func readPort(ports int, num string, buf []byte) (Port, error) {
	var p Port
	n, err := strconv.Atoi(num)
	if err != nil {
		return p, fmt.Errorf("port directory %q is not a number", num)
	}
	p.Num = n
	raw, err := readAt(ports, num+"/state", buf)
	if err != nil {
		return p, err
	}
	if p.State, err = ParsePortState(raw); err != nil {
		return p, err
	}
	if raw, err = readAt(ports, num+"/phys_state", buf); err != nil {
		return p, err
	}
	if p.PhysState, err = ParsePhysState(raw); err != nil {
		return p, err
	}
	if p.LinkLayer, err = readAt(ports, num+"/link_layer", buf); err != nil {
		return p, err
	}
	return p, nil
}

// under makes a PathError of a dir-relative read name its full path, so an
// operator's error says which file.
func under(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !filepath.IsAbs(pe.Path) {
		return &fs.PathError{Op: pe.Op, Path: filepath.Join(dir, pe.Path), Err: pe.Err}
	}
	return err
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

// readDirNames lists an open directory's entry names, "." and ".." left
// out, sorted (as os.ReadDir, so callers report in a stable order), with
// getdents directly: os.ReadDir would wrap the fd in an *os.File.
func readDirNames(dir int) ([]string, error) {
	entries, err := readDirEntries(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	return names, nil
}

// readAt reads a short attribute (dir-relative, or a path with dir
// unix.AT_FDCWD) into buf in one read, with plain system calls: sysfs
// returns an attribute whole, and a regular file as short as buf is read
// whole too. os.ReadFile would first register the file with the runtime's
// poller (four fcntl and an epoll_ctl, all failing or undone for a regular
// file), which costs more than the read itself when ADD reads every RDMA
// device's GUID. Returns the text without surrounding space.
// Equivalent to: cat $path
func readAt(dir int, path string, buf []byte) (string, error) {
	fd, err := openRetry(dir, path, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: path, Err: err}
		}
		return strings.TrimSpace(string(buf[:n])), nil
	}
}

// Async starts read on another goroutine and returns a wait for its
// result, which may be called any number of times. Sysfs reads that do not
// depend on a netns hop can then run on a second CPU while the hop does.
func Async[T any](read func() (T, error)) func() (T, error) {
	done := make(chan struct{})
	var v T
	var err error
	go func() {
		defer close(done)
		v, err = read()
	}()
	return func() (T, error) {
		<-done
		return v, err
	}
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

// ReadAttr reads one sysfs attribute, without its trailing newline.
func ReadAttr(path string) (string, error) { return readTrim(path) }

// readTrim reads one attribute by path; see readAt.
func readTrim(path string) (string, error) {
	var buf [4096]byte // a sysfs attribute is at most a page
	return readAt(unix.AT_FDCWD, path, buf[:])
}

func openRetry(dir int, path string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
