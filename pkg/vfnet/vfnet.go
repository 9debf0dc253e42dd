// Package vfnet finds and changes a VF's netdev inside a network namespace
// through one NETLINK_ROUTE handle: locate it by PCI parent, ethtool
// bus-info or altname (never by ifname alone), rename it, manage its
// altname and read what the pod sees.
package vfnet

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNetnsGone reports a network namespace path that no longer exists or
// is not a network namespace.
var ErrNetnsGone = errors.New("network namespace is gone")

// Handle is a NETLINK_ROUTE handle whose socket lives in one network
// namespace. A socket keeps the netns it was created in, so the handle's
// requests reach that netns from whichever thread makes them.
type Handle struct {
	nl   netlinksafe.Handle
	ns   ns.NetNS // the handle's netns; nil for the caller's own
	path string
}

// InNetns runs fn with a handle whose socket lives in the network
// namespace at path. Only the socket is opened inside the netns (netlink's
// NewHandleAt enters it on a locked thread and comes back); fn itself runs
// where the caller does, so host sysfs reads in fn see the host. A path
// that does not exist or is not a netns yields an error wrapping
// ErrNetnsGone, and fn does not run.
// Equivalent to: ip -netns $path link …
func InNetns(path string, fn func(h *Handle) error) error {
	target, err := openNetns(path)
	if err != nil {
		return err
	}
	defer target.Close()
	nh, err := netlinksafe.NewHandleAt(netns.NsHandle(target.Fd()), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink in netns %s: %w", path, err)
	}
	defer nh.Close()
	return fn(&Handle{nl: nh, ns: target, path: path})
}

// openNetns opens the network namespace at path; a path that does not
// exist or is not a netns yields an error wrapping ErrNetnsGone.
func openNetns(path string) (ns.NetNS, error) {
	target, err := ns.GetNS(path)
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	if errors.As(err, &notExist) || errors.As(err, &notNS) {
		return nil, fmt.Errorf("netns %s: %w", path, ErrNetnsGone)
	}
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	// ns.GetNS checks the filesystem only: a file of another namespace
	// type (say /proc/$pid/ns/mnt) passes it and fails setns with EINVAL.
	if typ, err := unix.IoctlRetInt(int(target.Fd()), unix.NS_GET_NSTYPE); err == nil && typ != unix.CLONE_NEWNET {
		target.Close()
		return nil, fmt.Errorf("netns %s is not a network namespace: %w", path, ErrNetnsGone)
	}
	return target, nil
}

// OpenHere opens a NETLINK_ROUTE handle in the calling thread's current
// netns (the host's, for the plugin). Close it when done.
func OpenHere() (*Handle, error) {
	nh, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &Handle{nl: nh, path: "(host)"}, nil
}

// Close releases the handle's socket. The handle InNetns lends fn is
// closed by InNetns.
func (h *Handle) Close() { h.nl.Close() }

// Taken reports whether a link of the handle's netns has name as its name
// or an altname (the kernel resolves both). A lookup error counts as taken.
func (h *Handle) Taken(name string) bool {
	_, err := h.nl.LinkByName(name)
	var nf netlink.LinkNotFoundError
	return !errors.As(err, &nf)
}

// SetAlias sets the link's ifalias.
// Equivalent to: ip link set dev $link alias $alias
func (h *Handle) SetAlias(l netlink.Link, alias string) error {
	if err := h.nl.LinkSetAlias(l, alias); err != nil {
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

// NS is the handle's network namespace, to run code in it (ns.NetNS.Do);
// nil for a handle of the caller's own netns (OpenHere).
func (h *Handle) NS() ns.NetNS { return h.ns }

// Method says how a VF was found.
type Method string

// Ways to find a VF, in the order they are tried.
const (
	ByParent  Method = "pci-parent"      // IFLA_PARENT_DEV_NAME, kernel >= 5.14
	ByBusInfo Method = "ethtool-businfo" // ETHTOOL_GDRVINFO bus_info
	ByAltName Method = "altname"
	// ByLastIndex: LocateLastSeen's fallback for a link with no bus
	// identity at all, recognized by the index and MAC it had when last found.
	ByLastIndex Method = "last-index"
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
	return h.locate(pci, altName, 0, "")
}

// locate is Locate with LocateLastSeen's fallback when index is not 0.
func (h *Handle) locate(pci, altName string, index int, mac string) (*Found, error) {
	links, err := h.nl.LinkList()
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
	case f.Link == nil && index > 0:
		if l := lastSeen(links, index, mac); l != nil {
			f.Link, f.By = l, ByLastIndex
			break
		}
		fallthrough
	case f.Link == nil:
		return nil, &NotFoundError{PCI: pci, AltName: altName, Netns: h.path, Present: Describe(links)}
	case altHolder != nil && altHolder.Attrs().Index != f.Link.Attrs().Index:
		f.AltHolder = altHolder
	}
	return f, nil
}

// byBusInfo asks ethtool for the bus-info of links that carry no PCI
// parent attribute (kernels before 5.14). Virtual links answer with an
// empty bus-info. The ioctl goes through a socket, which must be made in
// the handle's netns: the lookups run there, through ns.
// Equivalent to: ethtool -i $link | grep bus-info
func (h *Handle) byBusInfo(links []netlink.Link, pci string) netlink.Link {
	var ask []netlink.Link
	for _, l := range links {
		a := l.Attrs()
		// A veth (a pod's eth0, a test's stand-in) has no bus, and asking
		// waits for the RTNL lock.
		if a.ParentDev == "" && a.Flags&net.FlagLoopback == 0 && l.Type() != "veth" {
			ask = append(ask, l)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	var found netlink.Link
	lookup := func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, l := range ask {
			info, err := unix.IoctlGetEthtoolDrvinfo(fd, l.Attrs().Name)
			if err == nil && unix.ByteSliceToString(info.Bus_info[:]) == pci {
				found = l
				return nil
			}
		}
		return nil
	}
	if h.ns == nil {
		_ = lookup(nil)
	} else {
		_ = h.ns.Do(lookup)
	}
	return found
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
	l, err := h.nl.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s in netns %s: %w", name, h.path, err)
	}
	return l, nil
}

// Refresh re-reads a link by index.
func (h *Handle) Refresh(l netlink.Link) (netlink.Link, error) {
	nl, err := h.nl.LinkByIndex(l.Attrs().Index)
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
		if err := h.nl.LinkSetDown(l); err != nil {
			return fmt.Errorf("set %s down in netns %s: %w", old, h.path, err)
		}
	}
	err := h.nl.LinkSetName(l, name)
	if err != nil {
		err = fmt.Errorf("rename %s to %s in netns %s: %w", old, name, h.path, err)
	}
	if wasUp {
		if uerr := h.nl.LinkSetUp(l); uerr != nil && err == nil {
			err = fmt.Errorf("set %s up again in netns %s: %w", name, h.path, uerr)
		}
	}
	return err
}

// AddAltName adds an alternative name.
// Equivalent to: ip link property add dev $link altname $name
func (h *Handle) AddAltName(l netlink.Link, name string) error {
	if err := h.nl.LinkAddAltName(l, name); err != nil {
		return fmt.Errorf("add altname %s to %s in netns %s: %w", name, l.Attrs().Name, h.path, err)
	}
	return nil
}

// DelAltName removes an alternative name.
// Equivalent to: ip link property del dev $link altname $name
func (h *Handle) DelAltName(l netlink.Link, name string) error {
	if err := h.nl.LinkDelAltName(l, name); err != nil {
		return fmt.Errorf("remove altname %s from %s in netns %s: %w", name, l.Attrs().Name, h.path, err)
	}
	return nil
}

// SetVFGUIDs gives VF vf of the PF whose netdev has index pfIndex a node
// and a port GUID (8 bytes each, most significant first). The PF is named
// by index alone: looking it up would ask the kernel for every VF's info,
// which on an InfiniBand PF with many VFs can exceed a netlink message.
// Equivalent to: ip link set dev $pf vf $vf node_guid $node port_guid $port
func (h *Handle) SetVFGUIDs(pfIndex, vf int, node, port net.HardwareAddr) error {
	pf := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: pfIndex}}
	if err := h.nl.LinkSetVfGUID(pf, vf, node, nl.IFLA_VF_IB_NODE_GUID); err != nil {
		return fmt.Errorf("set node GUID %s of VF %d of the PF with ifindex %d in netns %s: %w", node, vf, pfIndex, h.path, err)
	}
	if err := h.nl.LinkSetVfGUID(pf, vf, port, nl.IFLA_VF_IB_PORT_GUID); err != nil {
		return fmt.Errorf("set port GUID %s of VF %d of the PF with ifindex %d in netns %s: %w", port, vf, pfIndex, h.path, err)
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
