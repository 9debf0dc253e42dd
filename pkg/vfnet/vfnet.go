// Package vfnet finds and changes a VF's netdev inside a network namespace
// through one NETLINK_ROUTE handle: locate it by PCI parent, ethtool
// bus-info or altname (never by ifname alone), rename it, manage its
// altname and read what the pod sees.
package vfnet

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNetnsGone reports a network namespace path that no longer exists.
var ErrNetnsGone = errors.New("network namespace is gone")

// Handle is a netlink handle bound to the namespace it was opened in.
type Handle struct {
	nl   *rtnl
	path string
	ns   int // the netns's fd, for sockets opened later; -1 for the host's
}

// InNetns runs fn with a NETLINK_ROUTE handle whose socket lives in the
// network namespace at path. A path that does not exist (or is no longer a
// netns) yields an error wrapping ErrNetnsGone.
//
// Only the handle's sockets are opened inside the netns: a socket keeps the
// netns it was created in, so fn itself runs where the caller does and no
// thread stays in the pod's netns while fn runs. Each hop is short and on
// the caller's own goroutine: lock the thread, enter, open the socket, go
// home, unlock. A hop on a goroutine of its own made the runtime start a
// thread for the waiting caller on every ADD (see hop for the one case that
// keeps a thread locked).
// Equivalent to: nsenter --net=$path …
func InNetns(path string, fn func(h *Handle) error) error {
	h, err := openHandle(path)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

// openHandle opens the handle InNetns lends fn: its NETLINK_ROUTE socket
// is made in the netns at path, whose fd it keeps for later sockets.
func openHandle(path string) (*Handle, error) {
	target, err := openNetns(path)
	if err != nil {
		return nil, err
	}
	var nl *rtnl
	err = hop(target, path, func() (err error) {
		nl, err = dialRtnl()
		return err
	})
	if err != nil {
		unix.Close(target)
		return nil, err
	}
	return &Handle{nl: nl, path: path, ns: target}, nil
}

// ErrStranded reports a thread that entered a pod's netns and could not
// return to its own. The calling goroutine stays locked to it, so the
// runtime never hands that thread to other work, and it ends with the
// goroutine. The plugin's process ends soon after; the monitor checks each
// attachment on a goroutine of its own.
var ErrStranded = errors.New("thread cannot return to its own network namespace")

// hop runs open, which must only open sockets, with the calling thread in
// the netns target, and brings the thread home again.
func hop(target int, path string, open func() error) error {
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open this thread's netns: %w", err)
	}
	defer unix.Close(home)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread() // setns failed: the thread never left
		if err == unix.EINVAL {  // a file, or a netns bind mount whose netns was unmounted
			return fmt.Errorf("netns %s is not a network namespace: %w", path, ErrNetnsGone)
		}
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	openErr := open()
	if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("leave netns %s: %w: %w", path, ErrStranded, err)
	}
	runtime.UnlockOSThread()
	if openErr != nil {
		return fmt.Errorf("open a socket in netns %s: %w", path, openErr)
	}
	return nil
}

// openNetns opens a netns path; a missing path is ErrNetnsGone.
func openNetns(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOENT || err == unix.ENOTDIR:
			return -1, fmt.Errorf("netns %s: %w", path, ErrNetnsGone)
		case err != nil:
			return -1, fmt.Errorf("open netns %s: %w", path, err)
		}
		return fd, nil
	}
}

// socket opens a socket in the handle's netns.
func (h *Handle) socket(domain, typ, proto int) (int, error) {
	if h.ns < 0 {
		return unix.Socket(domain, typ, proto)
	}
	fd := -1
	err := hop(h.ns, h.path, func() (err error) {
		fd, err = unix.Socket(domain, typ, proto)
		return err
	})
	return fd, err
}

// OpenHere opens a NETLINK_ROUTE handle in the calling thread's current
// netns. Close it when done.
func OpenHere() (*Handle, error) {
	nh, err := dialRtnl()
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &Handle{nl: nh, path: "(host)", ns: -1}, nil
}

// Close releases the handle's socket and netns.
func (h *Handle) Close() {
	h.nl.close()
	if h.ns >= 0 {
		unix.Close(h.ns)
	}
}

// Taken reports whether a link of the handle's netns has name as its name
// or an altname (the kernel resolves both). A lookup error counts as taken.
func (h *Handle) Taken(name string) bool {
	_, err := h.nl.linkGet(0, name)
	return !errors.Is(err, unix.ENODEV)
}

// SetAlias sets the link's ifalias.
// Equivalent to: ip link set dev $link alias $alias
func (h *Handle) SetAlias(l netlink.Link, alias string) error {
	if err := h.nl.linkSet(l.Attrs().Index, 0, 0, rtattr{unix.IFLA_IFALIAS, []byte(alias)}); err != nil {
		return fmt.Errorf("set alias of %s in netns %s: %w", l.Attrs().Name, h.path, err)
	}
	return nil
}

// FallbackName is a host interface name for a VF derived from its PCI
// address alone, e.g. vf18s00f2 for 0000:18:00.2 (the domain is added when
// not 0000). It always fits IFNAMSIZ.
func FallbackName(pci string) string {
	domain, rest, _ := strings.Cut(pci, ":")
	bus, rest, _ := strings.Cut(rest, ":")
	dev, fn, _ := strings.Cut(rest, ".")
	if domain == "0000" {
		domain = ""
	}
	return "vf" + domain + bus + "s" + dev + "f" + fn
}

// Netns is the path the handle was opened in.
func (h *Handle) Netns() string { return h.path }

// Method says how a VF was found.
type Method string

// Ways to find a VF, in the order they are tried.
const (
	ByParent  Method = "pci-parent"      // IFLA_PARENT_DEV_NAME, kernel >= 5.14
	ByBusInfo Method = "ethtool-businfo" // ETHTOOL_GDRVINFO bus_info
	ByAltName Method = "altname"
)

// Found is the VF's link and how it was identified, with every link of the
// netns as listed once for the search.
type Found struct {
	Link netlink.Link
	By   Method
	// AltHolder is the link holding altName when it is not Link (a conflict
	// the caller reports), nil otherwise.
	AltHolder netlink.Link
	All       []netlink.Link
}

// NotFoundError reports a VF that is not in the namespace, with what is.
type NotFoundError struct {
	PCI, AltName, Netns string
	Present             []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("VF %s (altname %s) not found in netns %s; it holds: %s",
		e.PCI, e.AltName, e.Netns, strings.Join(e.Present, ", "))
}

// AltNameConflictError reports an altname held by a link whose PCI parent
// is another device.
type AltNameConflictError struct {
	AltName, Holder, HolderPCI, PCI, Netns string
}

func (e *AltNameConflictError) Error() string {
	return fmt.Sprintf("altname %s in netns %s is held by %s, a link of PCI device %s, not of VF %s",
		e.AltName, e.Netns, e.Holder, e.HolderPCI, e.PCI)
}

// Locate finds the VF with PCI address pci: first by PCI parent, then by
// ethtool bus-info, then by altName. It lists the links once.
func (h *Handle) Locate(pci, altName string) (*Found, error) {
	links, err := h.nl.linkList()
	if err != nil {
		return nil, fmt.Errorf("list links in netns %s: %w", h.path, err)
	}
	f := &Found{All: links}
	var altHolder netlink.Link
	for _, l := range links {
		a := l.Attrs()
		if f.Link == nil && a.ParentDevBus == "pci" && a.ParentDev == pci {
			f.Link, f.By = l, ByParent
		}
		if altName != "" && slices.Contains(a.AltNames, altName) {
			altHolder = l
		}
	}
	if f.Link == nil {
		f.Link = h.byBusInfo(links, pci)
		if f.Link != nil {
			f.By = ByBusInfo
		}
	}
	switch {
	case f.Link == nil && altHolder != nil:
		if p := altHolder.Attrs().ParentDev; p != "" && p != pci {
			return nil, &AltNameConflictError{AltName: altName, Holder: altHolder.Attrs().Name, HolderPCI: p, PCI: pci, Netns: h.path}
		}
		f.Link, f.By = altHolder, ByAltName
	case f.Link == nil:
		return nil, &NotFoundError{PCI: pci, AltName: altName, Netns: h.path, Present: Describe(links)}
	case altHolder != nil && altHolder.Attrs().Index != f.Link.Attrs().Index:
		f.AltHolder = altHolder
	}
	return f, nil
}

// byBusInfo asks ethtool for the bus-info of links that carry no PCI
// parent attribute (kernels before 5.14). Virtual links answer with an
// empty bus-info.
func (h *Handle) byBusInfo(links []netlink.Link, pci string) netlink.Link {
	var fd = -1
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	for _, l := range links {
		a := l.Attrs()
		// A veth (a pod's eth0, a test's stand-in) has no bus, and asking
		// costs an ioctl that waits for the RTNL lock.
		if a.ParentDev != "" || a.Flags&net.FlagLoopback != 0 || l.Type() == "veth" {
			continue
		}
		if fd < 0 {
			var err error
			if fd, err = h.socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return nil
			}
		}
		info, err := unix.IoctlGetEthtoolDrvinfo(fd, a.Name)
		if err != nil {
			continue
		}
		if unix.ByteSliceToString(info.Bus_info[:]) == pci {
			return l
		}
	}
	return nil
}

// Describe lists links as "name(pci=…, altnames=…)" for error messages.
func Describe(links []netlink.Link) []string {
	out := make([]string, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		var extra []string
		if a.ParentDev != "" {
			extra = append(extra, a.ParentDevBus+"="+a.ParentDev)
		}
		if len(a.AltNames) > 0 {
			extra = append(extra, "altnames="+strings.Join(a.AltNames, "|"))
		}
		if len(extra) == 0 {
			out = append(out, a.Name)
			continue
		}
		out = append(out, a.Name+"("+strings.Join(extra, ", ")+")")
	}
	if len(out) == 0 {
		out = append(out, "no links")
	}
	return out
}

// LinkByName returns the link named name, or nil when there is none.
func (h *Handle) LinkByName(name string) (netlink.Link, error) {
	l, err := h.nl.linkGet(0, name)
	if errors.Is(err, unix.ENODEV) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s in netns %s: %w", name, h.path, err)
	}
	return l, nil
}

// Refresh re-reads a link by index.
func (h *Handle) Refresh(l netlink.Link) (netlink.Link, error) {
	nl, err := h.nl.linkGet(l.Attrs().Index, "")
	if err != nil {
		return nil, fmt.Errorf("read link %s (index %d) in netns %s: %w", l.Attrs().Name, l.Attrs().Index, h.path, err)
	}
	return nl, nil
}

// Rename gives the link a new name, taking it down first when it is up
// and restoring the up state after. Equivalent to:
// ip link set dev $old down; ip link set dev $old name $new; ip link set dev $new up
func (h *Handle) Rename(l netlink.Link, name string) error {
	old := l.Attrs().Name
	wasUp := l.Attrs().Flags&net.FlagUp != 0
	if wasUp {
		if err := h.nl.linkSet(l.Attrs().Index, 0, unix.IFF_UP); err != nil {
			return fmt.Errorf("set %s down in netns %s: %w", old, h.path, err)
		}
	}
	err := h.nl.linkSet(l.Attrs().Index, 0, 0, rtattr{unix.IFLA_IFNAME, cString(name)})
	if err != nil {
		err = fmt.Errorf("rename %s to %s in netns %s: %w", old, name, h.path, err)
	}
	if wasUp {
		if uerr := h.nl.linkSet(l.Attrs().Index, unix.IFF_UP, unix.IFF_UP); uerr != nil && err == nil {
			err = fmt.Errorf("set %s up again in netns %s: %w", name, h.path, uerr)
		}
	}
	return err
}

// AddAltName adds an alternative name.
// Equivalent to: ip link property add dev $link altname $name
func (h *Handle) AddAltName(l netlink.Link, name string) error {
	if err := h.nl.altName(unix.RTM_NEWLINKPROP, l.Attrs().Index, name); err != nil {
		return fmt.Errorf("add altname %s to %s in netns %s: %w", name, l.Attrs().Name, h.path, err)
	}
	return nil
}

// DelAltName removes an alternative name.
// Equivalent to: ip link property del dev $link altname $name
func (h *Handle) DelAltName(l netlink.Link, name string) error {
	if err := h.nl.altName(unix.RTM_DELLINKPROP, l.Attrs().Index, name); err != nil {
		return fmt.Errorf("remove altname %s from %s in netns %s: %w", name, l.Attrs().Name, h.path, err)
	}
	return nil
}

// HasCarrier reports IFF_LOWER_UP: the device has link.
func HasCarrier(l netlink.Link) bool {
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
}

// LinkLayer is "infiniband" for IPoIB links (ARPHRD_INFINIBAND) and
// "ethernet" otherwise.
func LinkLayer(l netlink.Link) string {
	if l.Attrs().EncapType == "infiniband" {
		return "infiniband"
	}
	return "ethernet"
}
