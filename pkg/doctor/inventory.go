package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// VendorMellanox is the PCI vendor ID of Mellanox (NVIDIA networking).
const VendorMellanox = "0x15b3"

// function is what sysfs says about one Mellanox PCI function.
type function struct {
	addr     string
	deviceID string
	driver   string // "" when unbound
	rdma     []sysfs.RDMADevice
	fwVer    string   // fw_ver of the first RDMA device; "" without one
	netdevs  []string // host netdevs (net/<name>), in the netns sysfs was mounted in

	// VF only.
	pf    string
	index int

	// PF only; -1 when the file is absent (no SR-IOV capability).
	totalVFs, numVFs int
	vfs              map[int]string
}

type readError struct {
	subject string
	err     error
}

// inventory is every Mellanox function on the node, PFs and VFs sorted by
// address.
type inventory struct {
	pfs, vfs   []*function
	byAddr     map[string]*function
	readErrors []readError
}

// reportUnreadable reports the functions scan could not read.
func (r *run) reportUnreadable() {
	for _, e := range r.inv.readErrors {
		r.add(SeverityError, finding.CheckSysfs, e.subject, "check the device with lspci -vvv -s "+e.subject+" and the kernel log; a half-probed device often needs a driver rebind or a reboot",
			"%v", e.err)
	}
}

// reportNoDevices says so when scan found no Mellanox function.
func (r *run) reportNoDevices() {
	if len(r.inv.pfs) == 0 && len(r.inv.vfs) == 0 {
		r.add(SeverityInfo, finding.CheckDevices, "node", "",
			"no Mellanox (vendor 0x15b3) PCI devices under %s/bus/pci/devices: nothing to check", r.sys.Root)
	}
}

// scan walks bus/pci/devices once. A device that cannot be read is kept
// as a read error and the walk goes on: one broken function must not hide
// the rest of the node.
func scan(sys sysfs.Reader) (*inventory, error) {
	dir := filepath.Join(sys.Root, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	inv := &inventory{byAddr: map[string]*function{}}
	for _, e := range entries {
		addr := e.Name()
		vendor, err := sysfs.ReadAttr(sys.PCIPath(addr, "vendor"))
		if err != nil || vendor != VendorMellanox {
			continue
		}
		f, err := readFunction(sys, addr)
		if err != nil {
			inv.readErrors = append(inv.readErrors, readError{addr, err})
		}
		if f == nil {
			continue
		}
		inv.byAddr[addr] = f
		if f.pf != "" {
			inv.vfs = append(inv.vfs, f)
		} else {
			inv.pfs = append(inv.pfs, f)
		}
	}
	byAddr := func(s []*function) { sort.Slice(s, func(i, j int) bool { return s[i].addr < s[j].addr }) }
	byAddr(inv.pfs)
	byAddr(inv.vfs)
	return inv, nil
}

// readFunction reads one function. On a partial failure it returns what it
// read with the error, so the function is still checked for the rest.
func readFunction(sys sysfs.Reader, addr string) (*function, error) {
	f := &function{addr: addr, index: -1, totalVFs: -1, numVFs: -1}
	f.deviceID, _ = sysfs.ReadAttr(sys.PCIPath(addr, "device"))
	if target, err := os.Readlink(sys.PCIPath(addr, "driver")); err == nil {
		f.driver = filepath.Base(target)
	}
	if target, err := os.Readlink(sys.PCIPath(addr, "physfn")); err == nil {
		f.pf = filepath.Base(target)
	}
	if names, err := os.ReadDir(sys.PCIPath(addr, "net")); err == nil {
		for _, n := range names {
			f.netdevs = append(f.netdevs, n.Name())
		}
	}
	var errs []error
	if f.pf != "" {
		siblings, err := sys.VFs(f.pf)
		if err != nil {
			errs = append(errs, err)
		}
		for i, a := range siblings {
			if a == addr {
				f.index = i
			}
		}
	} else {
		var err error
		if f.totalVFs, err = readIntAttr(sys.PCIPath(addr, "sriov_totalvfs")); err != nil {
			errs = append(errs, err)
		}
		if f.numVFs, err = readIntAttr(sys.PCIPath(addr, "sriov_numvfs")); err != nil {
			errs = append(errs, err)
		}
		if f.vfs, err = sys.VFs(addr); err != nil {
			errs = append(errs, err)
		}
	}
	rdma, err := sys.RDMADevices(addr)
	if err != nil {
		errs = append(errs, err)
	}
	f.rdma = rdma
	if len(rdma) > 0 {
		if f.fwVer, err = sys.FWVer(addr, rdma[0].Name); err != nil {
			errs = append(errs, err)
		}
	}
	return f, errors.Join(errs...)
}

// readIntAttr reads a numeric attribute; an absent file is -1, no error.
func readIntAttr(path string) (int, error) {
	s, err := sysfs.ReadAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1, fmt.Errorf("%s holds %q, not a number", path, s)
	}
	return n, nil
}

// rdmaPorts calls fn for every port of every RDMA device of f.
func (f *function) rdmaPorts(fn func(d sysfs.RDMADevice, p sysfs.Port)) {
	for _, d := range f.rdma {
		for _, p := range d.Ports {
			fn(d, p)
		}
	}
}
