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
	FWVer    string
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
func (r Reader) ReadVF(addr string) (*VF, error) {
	if _, err := os.Stat(r.pciPath(addr)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s under %s: %w", addr, filepath.Join(r.Root, "bus/pci/devices"), ErrNoDevice)
		}
		return nil, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	vf := &VF{PCI: addr, Index: -1}
	if pf, err := r.linkBase(r.pciPath(addr, "physfn")); err == nil {
		vf.PF = pf
		idx, err := r.vfIndex(pf, addr)
		if err != nil {
			return nil, err
		}
		vf.Index = idx
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read physfn of %s: %w", addr, err)
	}
	rdma, err := r.RDMADevices(addr)
	if err != nil {
		return nil, err
	}
	vf.RDMA = rdma
	return vf, nil
}

// linkBase returns the last element of a symlink's target.
func (r Reader) linkBase(path string) (string, error) {
	target, err := os.Readlink(path)
	if err != nil {
		return "", err
	}
	return filepath.Base(target), nil
}

// vfIndex finds N such that <pf>/virtfnN points at vf.
func (r Reader) vfIndex(pf, vf string) (int, error) {
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
	entries, err := listDir(r.pciPath(pf))
	if err != nil {
		return nil, fmt.Errorf("read PF %s: %w", pf, err)
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
		if target, err := r.linkBase(r.pciPath(pf, name)); err == nil {
			vfs[idx] = target
		}
	}
	return vfs, nil
}

// RDMADevices reads every RDMA device of a PCI function, sorted by name.
func (r Reader) RDMADevices(addr string) ([]RDMADevice, error) {
	entries, err := listDir(r.pciPath(addr, "infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read RDMA devices of %s: %w", addr, err)
	}
	var devs []RDMADevice
	for _, name := range entries {
		d, err := r.readRDMA(addr, name)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

func (r Reader) readRDMA(addr, name string) (RDMADevice, error) {
	dir := r.pciPath(addr, "infiniband", name)
	d := RDMADevice{Name: name, PCI: addr}
	raw, err := readTrim(filepath.Join(dir, "node_guid"))
	if err != nil {
		return d, fmt.Errorf("read node_guid of %s (%s): %w", name, addr, err)
	}
	if d.NodeGUID, err = ParseGUID(raw); err != nil {
		return d, fmt.Errorf("node_guid of %s (%s): %w", name, addr, err)
	}
	d.FWVer, _ = readTrim(filepath.Join(dir, "fw_ver"))
	ports, err := listDir(filepath.Join(dir, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d, fmt.Errorf("read ports of %s (%s): %w", name, addr, err)
	}
	for _, p := range ports {
		port, err := readPort(filepath.Join(dir, "ports", p))
		if err != nil {
			return d, fmt.Errorf("port %s of %s (%s): %w", p, name, addr, err)
		}
		d.Ports = append(d.Ports, port)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
	return d, nil
}

func readPort(dir string) (Port, error) {
	var p Port
	n, err := strconv.Atoi(filepath.Base(dir))
	if err != nil {
		return p, fmt.Errorf("port directory %q is not a number", filepath.Base(dir))
	}
	p.Num = n
	raw, err := readTrim(filepath.Join(dir, "state"))
	if err != nil {
		return p, err
	}
	if p.State, err = ParsePortState(raw); err != nil {
		return p, err
	}
	raw, err = readTrim(filepath.Join(dir, "phys_state"))
	if err != nil {
		return p, err
	}
	if p.PhysState, err = ParsePhysState(raw); err != nil {
		return p, err
	}
	if p.LinkLayer, err = readTrim(filepath.Join(dir, "link_layer")); err != nil {
		return p, err
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

// listDir lists a directory's entry names, sorted, with plain system
// calls. A missing directory is an fs.ErrNotExist PathError.
func listDir(path string) ([]string, error) {
	dir, err := openRetry(unix.AT_FDCWD, path, unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(dir)
	names, err := readDirNames(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "readdirent", Path: path, Err: err}
	}
	return names, nil
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
