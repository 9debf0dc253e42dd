// Package rdma answers, for the plugin, the monitor and the doctor alike,
// which RDMA device belongs to a VF and what it reports (GUIDs, port state,
// link layer), wherever the kernel keeps it: in the host's sysfs (RDMA netns
// shared mode, and every free VF), in the network namespace that holds the
// VF (exclusive mode, where the host's sysfs shows the VF's infiniband/
// directory empty), or bound to the VF's netdev rather than to its PCI
// function (soft-RoCE). It never decides on a device by its name alone.
package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Source says where a device was found.
type Source string

// Where devices are found, in the order they are looked for.
const (
	// HostSysfs: <sysfsRoot>/bus/pci/devices/<vf>/infiniband/, the host's
	// view (shared mode; free VFs in exclusive mode).
	HostSysfs Source = "host-sysfs"
	// NetnsNetlink: RDMA netlink opened in the VF's netns, a device whose
	// port is bound to the VF's netdev there (soft-RoCE, RoCE functions).
	NetnsNetlink Source = "netns-netlink"
	// NetnsSysfs: a sysfs instance made while in the VF's netns, which
	// shows the devices of that netns under their PCI parents (exclusive
	// mode: rdma-cni, ib-sriov-cni's rdmaIsolation).
	NetnsSysfs Source = "netns-sysfs"
)

// Device is one RDMA device of a VF as the kernel reports it where it
// lives. RDMADevice.PCI is the VF's address whichever way it was bound.
type Device struct {
	// RDMADevice is the device as its source gives it; its SysImageGUID
	// from sysfs (sys_image_guid) or RDMA netlink alike.
	sysfs.RDMADevice
	Source Source
	// Netns is the netns path the device was found in; "" for the host's.
	Netns string
}

// VF is what Find needs to know about the VF whose device it looks for.
type VF struct {
	PCI string
	PF  string // "" without one
	// Netns holds the VF's netdev; nil when it is in the caller's own
	// netns (the host's). NetnsPath names it in messages.
	Netns     ns.NetNS
	NetnsPath string
	// IfIndex is the VF netdev's index in Netns; 0 when unknown (then no
	// device bound to the netdev can be recognized).
	IfIndex int
	// IPoIB is set when the VF's netdev is an IPoIB link.
	IPoIB bool
	// WantInfiniBand is set when the configuration asks for linkLayer
	// infiniband.
	WantInfiniBand bool
}

// Finder looks for devices; Sys is the host's sysfs (a fixture in tests).
type Finder struct {
	Sys sysfs.Reader
	// ThreadLocked says the calling goroutine is locked to its OS thread
	// for good (the plugin's main, locked in init as containernetworking's
	// plugins do), so Find may enter the VF's netns on that thread with
	// ns.NetNS.Set and come back, as the ns package documents for a locked
	// thread, instead of ns.NetNS.Do, which runs the call on another
	// thread: in the plugin, where main holds its thread, that is a thread
	// handoff costing about half a millisecond per ADD (docs/performance.md).
	// Unset (the agent), every visit goes through Do.
	ThreadLocked bool
}

// in runs fn with the calling thread in netns n (see ThreadLocked). When
// the thread cannot return to its own netns the error says so: the
// caller must stop (the plugin fails the verb) rather than go on there.
func (f Finder) in(n ns.NetNS, fn func()) error {
	if !f.ThreadLocked {
		return n.Do(func(ns.NetNS) error { fn(); return nil })
	}
	own, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer own.Close()
	if err := n.Set(); err != nil {
		return fmt.Errorf("enter netns %s: %w", n.Path(), err)
	}
	fn()
	if err := own.Set(); err != nil {
		return fmt.Errorf("return from netns %s to %s: %w", n.Path(), own.Path(), err)
	}
	return nil
}

// Lookup is what Find found, where it looked, and whether the VF is one
// that must have a device. Close it when done: a device found in a netns
// is read through a sysfs instance the lookup keeps open for Refresh.
type Lookup struct {
	VF      VF
	Devices []Device
	// Capable says why the VF must have an RDMA device ("" when nothing
	// says so): its PF has one, its netdev is IPoIB, or the configuration
	// asks for InfiniBand.
	Capable string
	// Looked lists every place looked, with what it held, in order.
	Looked []string

	sys   sysfs.Reader // the sysfs the devices were found in, for Refresh
	mount *os.File     // the netns's sysfs instance, nil when none is open
	f     Finder
}

// Find looks for the VF's RDMA devices: in the host's sysfs under the VF's
// PCI function; when none is there, in the VF's netns. A VF that must have
// a device (its PF has one, it is IPoIB, or InfiniBand is configured) is
// looked for first under its PCI function in a sysfs instance of that
// netns, where RDMA netns exclusive mode puts a ConnectX VF's device; then,
// as for any VF on a node with ib_core, through RDMA netlink there, for a
// device whose port is bound to the VF's netdev (soft-RoCE). A place that
// cannot be read is noted in Looked, not an error, unless it is the host's
// sysfs.
func (f Finder) Find(vf VF) (*Lookup, error) {
	l := &Lookup{VF: vf, f: f, sys: f.Sys}
	host, err := f.Sys.RDMADevices(vf.PCI)
	if err != nil {
		return nil, err
	}
	l.Looked = append(l.Looked, fmt.Sprintf("host sysfs %s: %s", f.Sys.PCIPath(vf.PCI, "infiniband"), names(host)))
	if len(host) > 0 {
		l.Devices = wrap(host, HostSysfs, "")
		return l, nil
	}
	l.Capable = f.capable(vf)
	where := vf.NetnsPath
	if where == "" {
		where = "(host)"
	}
	if vf.Netns != nil && l.Capable != "" {
		var fsfd int
		var ferr error
		if err := f.in(vf.Netns, func() { fsfd, ferr = openSysfsContext() }); err != nil {
			return nil, fmt.Errorf("look for the RDMA device of VF %s in netns %s: %w", vf.PCI, where, err)
		}
		if l.readNetnsSysfs(fsfd, ferr, where); len(l.Devices) > 0 {
			return l, nil
		}
	}
	switch {
	case vf.IfIndex == 0:
		l.Looked = append(l.Looked, "RDMA netlink: not asked, the VF's netdev is not known")
		return l, nil
	case !f.ibCoreLoaded():
		l.Looked = append(l.Looked, fmt.Sprintf("RDMA netlink: not asked, ib_core is not loaded (no %s)",
			filepath.Join(f.Sys.Root, "module", "ib_core")))
		return l, nil
	}
	var probe netnsProbe
	list := func() { probe.bound, probe.listed, probe.nlErr = boundDevices(vf.IfIndex) }
	if vf.Netns != nil {
		if err := f.in(vf.Netns, list); err != nil {
			return nil, fmt.Errorf("look for the RDMA device of VF %s in netns %s: %w", vf.PCI, where, err)
		}
	} else {
		list()
	}
	l.Looked = append(l.Looked, probe.netlinkLooked(where, vf.IfIndex))
	l.Devices = probe.devices(vf)
	return l, nil
}

// readNetnsSysfs mounts the netns's sysfs context (made in that netns:
// fsfd, or the error making it) as a detached mount and reads the VF's
// devices under it.
func (l *Lookup) readNetnsSysfs(fsfd int, ferr error, where string) {
	label := fmt.Sprintf("sysfs of netns %s at bus/pci/devices/%s/infiniband", where, l.VF.PCI)
	if ferr != nil {
		l.Looked = append(l.Looked, fmt.Sprintf("%s: cannot make one: %v", label, ferr))
		return
	}
	mount, err := mountContext(fsfd)
	if err != nil {
		l.Looked = append(l.Looked, fmt.Sprintf("%s: cannot mount it: %v", label, err))
		return
	}
	sys := sysfs.Reader{Root: fmt.Sprintf("/proc/self/fd/%d", mount.Fd())}
	devs, err := sys.RDMADevices(l.VF.PCI)
	if err != nil {
		mount.Close()
		l.Looked = append(l.Looked, fmt.Sprintf("%s: %v", label, err))
		return
	}
	l.Looked = append(l.Looked, label+": "+names(devs))
	if len(devs) == 0 {
		mount.Close()
		return
	}
	l.Devices, l.sys, l.mount = wrap(devs, NetnsSysfs, l.VF.NetnsPath), sys, mount
}

// Refresh reads the devices again where they were found (no new search):
// ADD's port wait and the monitor's checks poll through it.
func (l *Lookup) Refresh() error {
	if len(l.Devices) == 0 {
		return nil
	}
	src := l.Devices[0].Source
	switch src {
	case HostSysfs, NetnsSysfs:
		devs, err := l.sys.RDMADevices(l.VF.PCI)
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			return fmt.Errorf("the RDMA device of VF %s is gone from %s", l.VF.PCI, src)
		}
		l.Devices = wrap(devs, src, l.VF.NetnsPath)
	case NetnsNetlink:
		var bound []netlinkDevice
		var err error
		read := func() { bound, _, err = boundDevices(l.VF.IfIndex) }
		if l.VF.Netns != nil {
			if derr := l.f.in(l.VF.Netns, read); derr != nil {
				return derr
			}
		} else {
			read()
		}
		if err != nil {
			return err
		}
		if len(bound) == 0 {
			return fmt.Errorf("the RDMA device of VF %s is no longer bound to its netdev", l.VF.PCI)
		}
		p := netnsProbe{bound: bound}
		l.Devices = p.devices(l.VF)
	}
	return nil
}

// Root is the sysfs root the devices were found under: the host's, or
// the netns's sysfs instance (valid until Close); "" for devices found
// through netlink. The monitor polls port files under it.
func (l *Lookup) Root() string {
	if len(l.Devices) == 0 || l.Devices[0].Source == NetnsNetlink {
		return ""
	}
	return l.sys.Root
}

// Close releases the netns's sysfs instance, if one is open.
func (l *Lookup) Close() {
	if l != nil && l.mount != nil {
		l.mount.Close()
		l.mount = nil
	}
}

// Missing explains, for a VF that must have an RDMA device and has none
// anywhere, why and where it was looked for; "" otherwise. The plugin
// turns it into error 102 under guidPolicy require, a warning under warn.
func (l *Lookup) Missing() string {
	if len(l.Devices) > 0 || l.Capable == "" {
		return ""
	}
	return fmt.Sprintf("no RDMA device of it found, though %s, so its GUID and port cannot be checked; looked in: %s",
		l.Capable, strings.Join(l.Looked, "; "))
}

// capable says why the VF must have an RDMA device, or "".
func (f Finder) capable(vf VF) string {
	if vf.PF != "" {
		if devs := f.pfDevices(vf.PF); len(devs) > 0 {
			return fmt.Sprintf("its PF %s has RDMA device %s", vf.PF, devs[0])
		}
	}
	if vf.IPoIB {
		return "its netdev is IPoIB"
	}
	if vf.WantInfiniBand {
		return "the configuration asks for linkLayer infiniband"
	}
	return ""
}

// pfDevices lists the names under the PF's infiniband/ in the host's sysfs.
// Equivalent to: ls $root/bus/pci/devices/$pf/infiniband
func (f Finder) pfDevices(pf string) []string {
	entries, err := os.ReadDir(f.Sys.PCIPath(pf, "infiniband"))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// ibCoreLoaded reports whether ib_core is loaded (or built in), so that an
// RDMA netlink socket can be opened without making the kernel load it.
func (f Finder) ibCoreLoaded() bool {
	_, err := os.Stat(filepath.Join(f.Sys.Root, "module", "ib_core"))
	return err == nil
}

// ExclusiveMode reports whether ib_core runs in RDMA netns exclusive mode
// (each device in one netns): its netns_mode parameter, which the kernel
// keeps current when the mode is changed at run time, reads "N". False
// when ib_core is not loaded.
// Equivalent to: rdma system show netns
func (f Finder) ExclusiveMode() bool {
	v, err := sysfs.ReadAttr(filepath.Join(f.Sys.Root, "module", "ib_core", "parameters", "netns_mode"))
	return err == nil && (v == "N" || v == "0")
}

func wrap(devs []sysfs.RDMADevice, src Source, netns string) []Device {
	out := make([]Device, len(devs))
	for i, d := range devs {
		out[i] = Device{RDMADevice: d, Source: src, Netns: netns}
	}
	return out
}

func names(devs []sysfs.RDMADevice) string {
	if len(devs) == 0 {
		return "empty"
	}
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = d.Name
	}
	return strings.Join(s, ", ")
}
