package vfnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
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

// LinkWatch is a NETLINK_ROUTE socket inside one network namespace,
// subscribed to its link notifications (RTNLGRP_LINK): RTM_NEWLINK on a
// rename, an altname added or removed on an up link, carrier, MTU, address
// or flags changing, or a link arriving; RTM_DELLINK on a link leaving.
// Ask has the kernel send a link's state on the same socket, so a caller
// polling the link needs no second socket. The socket holds the
// namespace: a netns whose path is gone lives on until Close.
type LinkWatch struct {
	id     NetnsID
	path   string
	f      *os.File
	conn   syscall.RawConn
	closed atomic.Bool
}

// WatchLinks opens a LinkWatch in the network namespace at path. Only the
// socket is made inside the netns, on a thread ns.Do locks and brings back,
// as InNetns does. A goroutine receives until Close: onLink hears every
// notification and answer (the update is the caller's), onErr every error
// message and every loss of notifications (ENOBUFS: the socket buffer
// overflowed), onEnd once when receiving ends, with nil after Close. A
// path that does not exist or is not a netns yields an error wrapping
// ErrNetnsGone.
// Equivalent to: ip -netns $path monitor link
//
// netlink's LinkSubscribeWithOptions would do but for two things: it
// offers no way to ask on the same socket (its ListExisting sends to the
// multicast group, which a socket without CAP_NET_ADMIN may not), and it
// allocates a 64 KiB buffer per message received.
func WatchLinks(path string, onLink func(netlink.LinkUpdate), onErr, onEnd func(error)) (*LinkWatch, error) {
	target, err := openNetns(path)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	id, err := fdNetnsID(target.Fd(), path)
	if err != nil {
		return nil, err
	}
	fd := -1
	err = target.Do(func(ns.NetNS) error {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		fd = s
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
			unix.Close(fd)
			return os.NewSyscallError("bind", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("watch links in netns %s: %w", path, err)
	}
	// Non-blocking: receives wait in the runtime's poller and Close ends them.
	w := &LinkWatch{id: id, path: path, f: os.NewFile(uintptr(fd), "netlink")}
	if w.conn, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return nil, fmt.Errorf("watch links in netns %s: %w", path, err)
	}
	go w.receive(onLink, onErr, onEnd)
	return w, nil
}

// ID is the ID of the watched namespace.
func (w *LinkWatch) ID() NetnsID { return w.id }

// Close closes the socket; the receiving goroutine ends and calls onEnd(nil).
func (w *LinkWatch) Close() {
	if w.closed.CompareAndSwap(false, true) {
		w.f.Close()
	}
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS of linux/rtnetlink.h
// (kernels before 5.6 ignore it and send the counters).
const rtextFilterSkipStats = 1 << 3

// Ask asks the kernel for the link with index; the answer comes to onLink
// like a notification, or to onErr (ENODEV when there is no such link).
// Equivalent to: ip -netns $path link show dev $index
func (w *LinkWatch) Ask(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	// The counters are a third of the answer and nobody asks for them.
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(rtextFilterSkipStats)))
	data := req.Serialize()
	var serr error
	err := w.conn.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), data, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("ask for link %d in netns %s: %w", index, w.path, err)
	}
	return nil
}

// receive reads the socket until it is closed or fails.
func (w *LinkWatch) receive(onLink func(netlink.LinkUpdate), onErr, onEnd func(error)) {
	buf := make([]byte, 16<<10) // a VF's link message is a few KiB
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := w.conn.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		switch {
		case w.closed.Load():
			onEnd(nil)
			return
		case errors.Is(err, unix.ENOBUFS):
			onErr(fmt.Errorf("link notifications in netns %s lost: %w", w.path, err))
			continue
		case err != nil:
			onEnd(fmt.Errorf("receive link notifications in netns %s: %w", w.path, err))
			return
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != nl.PidKernel {
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			onErr(fmt.Errorf("link notification in netns %s: %w", w.path, err))
			continue
		}
		for _, m := range msgs {
			w.deliver(m, onLink, onErr)
		}
	}
}

func (w *LinkWatch) deliver(m syscall.NetlinkMessage, onLink func(netlink.LinkUpdate), onErr func(error)) {
	switch m.Header.Type {
	case unix.NLMSG_ERROR:
		if len(m.Data) >= 4 {
			if errno := -int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
				onErr(fmt.Errorf("link request in netns %s: %w", w.path, syscall.Errno(errno)))
			}
		}
		return
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
	default:
		return
	}
	data := bytes.Clone(m.Data) // the receive buffer is reused
	header := unix.NlMsghdr(m.Header)
	link, err := netlink.LinkDeserialize(&header, data)
	if err != nil {
		onErr(fmt.Errorf("link notification in netns %s: %w", w.path, err))
		return
	}
	onLink(netlink.LinkUpdate{IfInfomsg: *nl.DeserializeIfInfomsg(data), Header: header, Link: link})
}
