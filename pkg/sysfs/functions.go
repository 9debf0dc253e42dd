package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// Function is what sysfs says about one PCI function, as Functions reads
// it: the one walk of bus/pci/devices that the doctor's inventory, its
// leftover check and hostconfig's PF matching share.
type Function struct {
	Addr   string
	Vendor string // "0x15b3"
	Device string // "0x1021"
	Driver string // "" when unbound
	// PF is the function physfn points at; "" for a PF or a function
	// without SR-IOV.
	PF string
	// Index is the VF's index among its PF's virtfnN links; -1 for a PF or
	// when the PF has no link to it.
	Index int
	// TotalVFs and NumVFs are a PF's sriov_totalvfs and sriov_numvfs; -1
	// when absent (no SR-IOV capability) and for a VF.
	TotalVFs, NumVFs int
	// VFs are a PF's virtfnN links by N; nil for a VF.
	VFs map[int]string
	// Netdevs are its host netdevs (net/<name>), in the netns sysfs was
	// mounted in.
	Netdevs []string
}

// IsVF reports whether the function is a virtual function.
func (f *Function) IsVF() bool { return f.PF != "" }

// FunctionError is a function that Functions could not read in full.
type FunctionError struct {
	Addr string
	Err  error
}

func (e FunctionError) Error() string { return e.Addr + ": " + e.Err.Error() }

func (e FunctionError) Unwrap() error { return e.Err }

// Functions walks bus/pci/devices once and reads every function that
// keep accepts, given its address and vendor (nil keeps all), sorted by address. A function that
// cannot be read in full is returned with what was read and listed in
// errs: one broken function does not hide the rest of the node. err is
// the listing itself failing.
// Equivalent to: ls $root/bus/pci/devices
func (r Reader) Functions(keep func(addr, vendor string) bool) (fns []*Function, errs []FunctionError, err error) {
	entries, err := os.ReadDir(filepath.Join(r.Root, "bus", "pci", "devices"))
	if err != nil {
		return nil, nil, fmt.Errorf("list PCI devices: %w", err)
	}
	vfsOf := map[string]map[int]string{} // PF → its virtfn links, read once
	for _, e := range entries {
		addr := e.Name()
		vendor, _ := ReadAttr(r.pciPath(addr, "vendor"))
		if keep != nil && !keep(addr, vendor) {
			continue
		}
		f, err := r.readFunction(addr, vendor, vfsOf)
		if err != nil {
			errs = append(errs, FunctionError{Addr: addr, Err: err})
		}
		fns = append(fns, f)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Addr < fns[j].Addr })
	return fns, errs, nil
}

func (r Reader) readFunction(addr, vendor string, vfsOf map[string]map[int]string) (*Function, error) {
	f := &Function{Addr: addr, Vendor: vendor, Index: -1, TotalVFs: -1, NumVFs: -1,
		Driver: r.Driver(addr), Netdevs: r.Netdevs(addr)}
	f.Device, _ = ReadAttr(r.pciPath(addr, "device"))
	if pf, err := readlinkBase(r.pciPath(addr, "physfn")); err == nil {
		f.PF = pf
		vfs, ok := vfsOf[pf]
		if !ok {
			vfs, err = r.VFs(pf)
			if err != nil {
				return f, err
			}
			vfsOf[pf] = vfs
		}
		for i, a := range vfs {
			if a == addr {
				f.Index = i
			}
		}
		return f, nil
	}
	var errs []error
	var err error
	if f.TotalVFs, err = ReadOptInt(r.pciPath(addr, "sriov_totalvfs")); err != nil {
		errs = append(errs, err)
	}
	if f.NumVFs, err = ReadOptInt(r.pciPath(addr, "sriov_numvfs")); err != nil {
		errs = append(errs, err)
	}
	if f.VFs, err = r.VFs(addr); err != nil {
		errs = append(errs, err)
	}
	vfsOf[addr] = f.VFs
	return f, errors.Join(errs...)
}

// Driver is the name of the driver bound to PCI function addr, "" when
// none is.
// Equivalent to: basename "$(readlink $root/bus/pci/devices/$addr/driver)"
func (r Reader) Driver(addr string) string {
	d, _ := readlinkBase(r.pciPath(addr, "driver"))
	return d
}

// maxNetdevs bounds the netdevs read of one PCI function: a function has
// one or two; a tree with more is not the kernel's.
const maxNetdevs = 8

// Netdevs are the host netdevs of PCI function addr (its net/ entries),
// in the netns sysfs was mounted in, sorted, at most maxNetdevs; nil when
// it has none.
// Equivalent to: ls $root/bus/pci/devices/$addr/net | head -8
func (r Reader) Netdevs(addr string) []string {
	d, err := os.Open(r.pciPath(addr, "net"))
	if err != nil {
		return nil
	}
	defer d.Close()
	entries, _ := d.ReadDir(maxNetdevs)
	if len(entries) == 0 {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Virtfn is the address PF pf's virtfnI link points at, "" when absent.
// Equivalent to: basename "$(readlink $root/bus/pci/devices/$pf/virtfn$i)"
func (r Reader) Virtfn(pf string, i int) string {
	a, _ := readlinkBase(r.pciPath(pf, "virtfn"+strconv.Itoa(i)))
	return a
}

// ReadInt reads a decimal attribute.
func ReadInt(path string) (int, error) {
	s, err := ReadAttr(path)
	if err != nil {
		return 0, err // names path
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a number", path, s)
	}
	return v, nil
}

// ReadOptInt reads a decimal attribute that a function may lack: an
// absent file is -1 and no error.
func ReadOptInt(path string) (int, error) {
	v, err := ReadInt(path)
	if errors.Is(err, fs.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	return v, nil
}

// NetdevState is what sysfs says of a host netdev's link.
type NetdevState struct {
	Up        bool   // administratively up: IFF_UP in flags
	Carrier   bool   // the kernel's carrier; it knows none for a netdev that is down
	OperState string // operstate, "" when unreadable
}

// NetdevState reads the link state of host netdev name of PCI function
// addr. It describes the netns sysfs was mounted in, whichever netns the
// caller runs in, as the net/ listing does. The kernel refuses to read
// carrier of a netdev that is down; it is read only when flags say up.
// Equivalent to: cat $root/bus/pci/devices/$addr/net/$name/{flags,carrier,operstate}
func (r Reader) NetdevState(addr, name string) (NetdevState, error) {
	var st NetdevState
	s, err := ReadAttr(r.pciPath(addr, "net", name, "flags"))
	if err != nil {
		return st, err
	}
	flags, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return st, fmt.Errorf("flags of %s: %w", name, err)
	}
	st.OperState, _ = ReadAttr(r.pciPath(addr, "net", name, "operstate"))
	if st.Up = flags&unix.IFF_UP != 0; !st.Up {
		return st, nil
	}
	c, err := ReadAttr(r.pciPath(addr, "net", name, "carrier"))
	if err != nil {
		return st, err
	}
	st.Carrier = c == "1"
	return st, nil
}
