package doctor

import (
	"errors"
	"os"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// VendorMellanox is the PCI vendor ID of Mellanox (NVIDIA networking).
const VendorMellanox = "0x15b3"

// function is what sysfs says about one Mellanox PCI function.
type function struct {
	addr     string
	vendor   string
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
// address, and the functions of other vendors that have an RDMA device
// (the port checks' alone: their ports matter to a pod as much).
type inventory struct {
	pfs, vfs           []*function
	otherPFs, otherVFs []*function
	byAddr             map[string]*function
	readErrors         []readError
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

// scan reads every Mellanox function and every other function with an
// RDMA device (sysfs.Functions: one walk of bus/pci/devices), and their
// RDMA devices. A function that cannot be read
// in full is kept as a read error with what was read, and the scan goes
// on: one broken function must not hide the rest of the node.
func scan(sys sysfs.Reader) (*inventory, error) {
	fns, fnErrs, err := sys.Functions(func(addr, vendor string) bool {
		if vendor == VendorMellanox {
			return true
		}
		_, err := os.Stat(sys.PCIPath(addr, "infiniband"))
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	inv := &inventory{byAddr: map[string]*function{}}
	errs := map[string][]error{}
	for _, e := range fnErrs {
		errs[e.Addr] = append(errs[e.Addr], e.Err)
	}
	for _, sf := range fns {
		f := &function{addr: sf.Addr, vendor: sf.Vendor, deviceID: sf.Device, driver: sf.Driver, netdevs: sf.Netdevs,
			pf: sf.PF, index: sf.Index, totalVFs: sf.TotalVFs, numVFs: sf.NumVFs, vfs: sf.VFs}
		if err := f.readRDMA(sys); err != nil {
			errs[f.addr] = append(errs[f.addr], err)
		}
		if err := errors.Join(errs[f.addr]...); err != nil {
			inv.readErrors = append(inv.readErrors, readError{f.addr, err})
		}
		switch {
		case sf.Vendor != VendorMellanox && len(f.rdma) == 0:
		case sf.Vendor != VendorMellanox && sf.IsVF():
			inv.otherVFs = append(inv.otherVFs, f)
		case sf.Vendor != VendorMellanox:
			inv.otherPFs = append(inv.otherPFs, f)
		case sf.IsVF():
			inv.byAddr[f.addr] = f
			inv.vfs = append(inv.vfs, f)
		default:
			inv.byAddr[f.addr] = f
			inv.pfs = append(inv.pfs, f)
		}
	}
	return inv, nil
}

// readRDMA reads the function's RDMA devices and the firmware version of
// the first.
func (f *function) readRDMA(sys sysfs.Reader) error {
	rdma, err := sys.RDMADevices(f.addr)
	f.rdma = rdma
	if err != nil || len(rdma) == 0 {
		return err
	}
	f.fwVer, err = sys.FWVer(f.addr, rdma[0].Name)
	return err
}

// rdmaPorts calls fn for every port of every RDMA device of f.
func (f *function) rdmaPorts(fn func(d sysfs.RDMADevice, p sysfs.Port)) {
	for _, d := range f.rdma {
		for _, p := range d.Ports {
			fn(d, p)
		}
	}
}
