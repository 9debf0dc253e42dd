package vfnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rtnl is a NETLINK_ROUTE socket with one receive buffer for its whole
// life. It speaks the handful of link requests vfnet needs. The netlink
// library's handle allocates a fresh 64 KiB buffer for every receive and
// registers its socket with the runtime's poller; in a plugin process that
// lives a few milliseconds, that (page faults on fresh memory, epoll setup)
// cost more than the requests themselves.
type rtnl struct {
	fd  int
	seq uint32
	buf []byte
}

// rtnlBufSize is the receive buffer. The kernel sizes dump datagrams to
// the largest buffer a socket has received into (at most 32 KiB) or to one
// link's message if larger; a truncated datagram grows the buffer and the
// request is sent again.
const rtnlBufSize = 32 << 10

// maxDumpRetries bounds the retries of a dump the kernel marks interrupted
// (links changed while it ran).
const maxDumpRetries = 10

// errDumpInterrupted reports a dump the kernel marked NLM_F_DUMP_INTR.
var errDumpInterrupted = errors.New("link dump interrupted by concurrent changes")

func dialRtnl() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &rtnl{fd: fd}, nil
}

func (c *rtnl) close() { unix.Close(c.fd) }

// ifinfomsg is struct ifinfomsg (16 bytes).
type ifinfomsg struct {
	family uint8
	index  int32
	flags  uint32
	change uint32
}

func (m ifinfomsg) append(b []byte) []byte {
	b = append(b, m.family, 0, 0, 0) // family, pad, type (u16)
	b = binary.NativeEndian.AppendUint32(b, uint32(m.index))
	b = binary.NativeEndian.AppendUint32(b, m.flags)
	return binary.NativeEndian.AppendUint32(b, m.change)
}

// appendAttr appends a route attribute, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%unix.NLMSG_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

func cString(s string) []byte { return append([]byte(s), 0) }

// nameAttr is the attribute type that looks a link up by name:
// IFLA_IFNAME, or IFLA_ALT_IFNAME for names too long to be an ifname (only
// altnames are).
func nameAttr(name string) uint16 {
	if len(name) < unix.IFNAMSIZ {
		return unix.IFLA_IFNAME
	}
	return unix.IFLA_ALT_IFNAME
}

// do sends one request and returns the payloads of the replies of type
// want (for a dump, every part; otherwise the one reply). With NLM_F_ACK
// and no want, it returns after the kernel's acknowledgement. An error
// reply is returned as its errno.
func (c *rtnl) do(typ, flags uint16, body []byte, want uint16) ([][]byte, error) {
	for attempt := 0; ; attempt++ {
		out, err := c.exchange(typ, flags, body, want)
		if errors.Is(err, errDumpInterrupted) && attempt < maxDumpRetries {
			continue
		}
		var trunc truncatedError
		if errors.As(err, &trunc) && attempt < maxDumpRetries {
			c.buf = make([]byte, trunc.need)
			continue
		}
		return out, err
	}
}

// truncatedError reports a datagram longer than the receive buffer.
type truncatedError struct{ need int }

func (e truncatedError) Error() string {
	return fmt.Sprintf("netlink reply of %d bytes truncated", e.need)
}

func (c *rtnl) exchange(typ, flags uint16, body []byte, want uint16) ([][]byte, error) {
	c.seq++
	seq := c.seq
	req := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	req = append(req, body...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], flags|unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], seq)
	if err := sendto(c.fd, req); err != nil {
		return nil, err
	}
	if c.buf == nil {
		c.buf = make([]byte, rtnlBufSize)
	}
	dump := flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
	var out [][]byte
	var failure error
	for {
		n, err := recv(c.fd, c.buf)
		if err != nil {
			return nil, err
		}
		if n > len(c.buf) {
			// The rest of a dump still comes: drain it, then ask again.
			failure = truncatedError{need: n}
			if !dump {
				return nil, failure
			}
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(c.buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse netlink reply: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // a late reply to an earlier request
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 && failure == nil {
				failure = errDumpInterrupted
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				if failure != nil {
					return nil, failure
				}
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error reply")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return nil, unix.Errno(-errno)
				}
				return out, nil // the acknowledgement
			case want:
				if failure == nil {
					// Copy: the buffer is reused for the next datagram.
					out = append(out, append([]byte(nil), m.Data...))
				}
				if !dump && flags&unix.NLM_F_ACK == 0 {
					return out, nil
				}
			}
		}
	}
}

func sendto(fd int, b []byte) error {
	for {
		err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err != unix.EINTR {
			return err
		}
	}
}

// recv reads one datagram and returns its full length, which exceeds
// len(buf) when it was truncated.
func recv(fd int, buf []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func deserialize(payloads [][]byte) ([]netlink.Link, error) {
	links := make([]netlink.Link, 0, len(payloads))
	for _, p := range payloads {
		if len(p) < unix.SizeofIfInfomsg {
			return nil, errors.New("short link message")
		}
		l, err := netlink.LinkDeserialize(nil, p)
		if err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS (linux/rtnetlink.h,
// kernel 4.18): asked in IFLA_EXT_MASK, the kernel leaves out the link's
// counters and the per-CPU inet6 and ICMPv6 statistics it would otherwise
// sum up for every link of a dump. Nothing here reads them; older kernels
// ignore the bit.
const rtextFilterSkipStats = 1 << 3

// appendSkipStats asks a link request to leave statistics out.
func appendSkipStats(b []byte) []byte {
	return appendAttr(b, unix.IFLA_EXT_MASK, binary.NativeEndian.AppendUint32(nil, rtextFilterSkipStats))
}

// linkDumpRequest is the body of linkList's request.
func linkDumpRequest() []byte {
	return appendSkipStats(ifinfomsg{family: unix.AF_UNSPEC}.append(nil))
}

// linkList lists every link of the socket's netns.
// Equivalent to: ip -d link show
func (c *rtnl) linkList() ([]netlink.Link, error) {
	payloads, err := c.do(unix.RTM_GETLINK, unix.NLM_F_DUMP, linkDumpRequest(), unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	return deserialize(payloads)
}

// linkGet reads one link by index, or by name (or altname) when index is 0.
// Equivalent to: ip link show dev $name
func (c *rtnl) linkGet(index int, name string) (netlink.Link, error) {
	body := ifinfomsg{family: unix.AF_UNSPEC, index: int32(index)}.append(nil)
	if index == 0 {
		body = appendAttr(body, nameAttr(name), cString(name))
	}
	body = appendSkipStats(body)
	payloads, err := c.do(unix.RTM_GETLINK, 0, body, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	links, err := deserialize(payloads)
	if err != nil {
		return nil, err
	}
	if len(links) != 1 {
		return nil, fmt.Errorf("netlink returned %d links for one", len(links))
	}
	return links[0], nil
}

// linkSet changes a link: flags under change, and the given attributes.
func (c *rtnl) linkSet(index int, flags, change uint32, attrs ...rtattr) error {
	body := ifinfomsg{family: unix.AF_UNSPEC, index: int32(index), flags: flags, change: change}.append(nil)
	for _, a := range attrs {
		body = appendAttr(body, a.typ, a.data)
	}
	_, err := c.do(unix.RTM_NEWLINK, unix.NLM_F_ACK, body, 0)
	return err
}

type rtattr struct {
	typ  uint16
	data []byte
}

// altName adds (RTM_NEWLINKPROP) or removes (RTM_DELLINKPROP) an altname.
// Equivalent to: ip link property add|del dev $link altname $name
func (c *rtnl) altName(typ uint16, index int, name string) error {
	body := ifinfomsg{family: unix.AF_UNSPEC, index: int32(index)}.append(nil)
	list := appendAttr(nil, unix.IFLA_ALT_IFNAME, cString(name))
	body = appendAttr(body, unix.IFLA_PROP_LIST|unix.NLA_F_NESTED, list)
	_, err := c.do(typ, unix.NLM_F_ACK, body, 0)
	return err
}
