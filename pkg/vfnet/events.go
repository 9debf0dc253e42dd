package vfnet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetnsID identifies a network namespace: the device and inode of its nsfs
// file, the same through every path, bind mount and descriptor naming it.
type NetnsID struct{ Dev, Ino uint64 }

// IsZero reports the zero ID, which names no namespace.
func (id NetnsID) IsZero() bool { return id == NetnsID{} }

// String is the inode as /proc shows it: net:[4026532417].
func (id NetnsID) String() string { return fmt.Sprintf("net:[%d]", id.Ino) }

func statID(st *syscall.Stat_t) NetnsID { return NetnsID{Dev: st.Dev, Ino: st.Ino} }

// NetnsIDOf returns the ID of what path names now, following a bind mount
// or a /proc magic link. It checks no namespace type: a pod netns path
// that was unmounted names a plain file, whose ID differs from the
// netns's. A path that does not exist yields an error wrapping
// ErrNetnsGone.
// Equivalent to: stat -L -c '%d %i' $path
func NetnsIDOf(path string) (NetnsID, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NetnsID{}, fmt.Errorf("netns %s: %w", path, ErrNetnsGone)
	}
	if err != nil {
		return NetnsID{}, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return statID(fi.Sys().(*syscall.Stat_t)), nil
}

// NetnsAlive reports whether path names a network namespace now.
func NetnsAlive(path string) bool {
	target, err := openNetns(path)
	if err != nil {
		return false
	}
	target.Close()
	return true
}

// NetnsID is the ID of the netns the handle's socket lives in.
func (h *Handle) NetnsID() (NetnsID, error) {
	if h.ns == nil {
		return NetnsIDOf("/proc/thread-self/ns/net")
	}
	return fdNetnsID(h.ns.Fd(), h.path)
}

func fdNetnsID(fd uintptr, path string) (NetnsID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fd), &st); err != nil {
		return NetnsID{}, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return statID(&st), nil
}

// Links lists the links of the handle's netns with their altnames and
// parent devices.
// Equivalent to: ip -d link show
func (h *Handle) Links() ([]netlink.Link, error) {
	links, err := h.nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links in netns %s: %w", h.path, err)
	}
	return links, nil
}

// LocateLastSeen is Locate with one more way to recognize the VF: when
// neither its PCI parent, its bus-info nor its altname finds it, the link
// with the index it had when last found, if that link has no bus identity
// at all and still carries mac. A VF always has a PCI parent on kernels
// since 5.14, or bus-info before; the fallback is for links that have
// neither (veth stand-ins), whose only PCI identity is the altname, so that
// losing the altname reads as altname-missing rather than missing.
func (h *Handle) LocateLastSeen(pci, altName string, index int, mac string) (*Found, error) {
	return h.locate(pci, altName, index, mac)
}

func lastSeen(links []netlink.Link, index int, mac string) netlink.Link {
	for _, l := range links {
		a := l.Attrs()
		if a.Index == index && a.ParentDev == "" && mac != "" && strings.EqualFold(a.HardwareAddr.String(), mac) {
			return l
		}
	}
	return nil
}

// Subscribe opens a NETLINK_ROUTE socket inside the network namespace at
// path, subscribed to its link notifications (RTNLGRP_LINK: RTM_NEWLINK on
// a rename, an altname added or removed, carrier, MTU, address or flags
// changing, or a link arriving; RTM_DELLINK on a link leaving), and
// returns the namespace's ID. Updates go to ch until done is closed, which
// closes the socket; then, or when receiving fails (an overflowing socket
// buffer loses events), ch is closed. onErr hears receive errors. Only the
// socket is made inside the netns, on a locked thread that comes back, as
// InNetns does. The socket holds the namespace: a netns whose path is gone
// lives on until done is closed. A path that does not exist or is not a
// netns yields an error wrapping ErrNetnsGone.
// Equivalent to: ip -netns $path monitor link
func Subscribe(path string, ch chan<- netlink.LinkUpdate, done <-chan struct{}, onErr func(error)) (NetnsID, error) {
	target, err := openNetns(path)
	if err != nil {
		return NetnsID{}, err
	}
	defer target.Close()
	id, err := fdNetnsID(target.Fd(), path)
	if err != nil {
		return NetnsID{}, err
	}
	h := netns.NsHandle(target.Fd())
	err = netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{Namespace: &h, ErrorCallback: onErr})
	if err != nil {
		return NetnsID{}, fmt.Errorf("subscribe to link changes in netns %s: %w", path, err)
	}
	return id, nil
}
