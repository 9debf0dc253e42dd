package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// RDMA netlink (uapi rdma/rdma_netlink.h) beyond what vishvananda/netlink
// names: the port query, and the attributes of its answer.
const (
	nldevCmdPortGet        = 5
	nldevAttrNdevIndex     = 50
	nldevAttrNdevName      = 51
	nldevAttrDevProtocol   = 67
	dumpInterruptedRetries = 3
)

// netlinkDevice is one RDMA device as RDMA netlink shows it in a netns.
type netlinkDevice struct {
	index    uint32
	name     string
	nodeGUID sysfs.GUID
	sysGUID  sysfs.GUID
	protocol string // "ib", "roce", "iw", …; "" from kernels that do not say
	ports    []netlinkPort
}

type netlinkPort struct {
	sysfs.Port
	ndevIndex int // the port's netdev in this netns; 0 when none (or in another netns)
	ndevName  string
}

// netnsProbe is what one visit to a netns learned.
type netnsProbe struct {
	listed []string        // every device RDMA netlink listed there
	bound  []netlinkDevice // those with a port bound to the VF's netdev
	nlErr  error
}

// boundDevices lists, through RDMA netlink in the calling thread's netns,
// the devices with a port whose netdev is ifindex. The kernel reports a
// port's netdev only when it is in the same netns as the asking socket, so
// an index names one netdev without doubt.
// Equivalent to: rdma link show (the netdev column)
// It also returns the names of every device listed, for messages.
func boundDevices(ifindex int) (bound []netlinkDevice, listed []string, err error) {
	all, err := listDevices()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range all {
		listed = append(listed, d.name)
		if slices.ContainsFunc(d.ports, func(p netlinkPort) bool { return p.ndevIndex == ifindex }) {
			bound = append(bound, d)
		}
	}
	if err := bindProtocol(bound); err != nil {
		return nil, listed, err
	}
	return bound, listed, nil
}

// listDevices lists every RDMA device RDMA netlink shows in the calling
// thread's netns, with its ports.
// Equivalent to: rdma dev show; rdma link show
func listDevices() ([]netlinkDevice, error) {
	var links []*netlink.RdmaLink
	var err error
	for range dumpInterruptedRetries {
		if links, err = netlink.RdmaLinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	out := make([]netlinkDevice, 0, len(links))
	for _, l := range links {
		d := netlinkDevice{index: l.Attrs.Index, name: l.Attrs.Name}
		if d.nodeGUID, err = GUIDFromNetlink(l.Attrs.NodeGuid); err != nil {
			return nil, fmt.Errorf("RDMA device %s: node GUID: %w", d.name, err)
		}
		if d.sysGUID, err = GUIDFromNetlink(l.Attrs.SysImageGuid); err != nil {
			return nil, fmt.Errorf("RDMA device %s: system image GUID: %w", d.name, err)
		}
		for port := uint32(1); port <= l.Attrs.NumPorts; port++ {
			p, err := queryPort(d.index, port)
			if err != nil {
				return nil, fmt.Errorf("RDMA device %s port %d: %w", d.name, port, err)
			}
			d.ports = append(d.ports, p)
		}
		out = append(out, d)
	}
	return out, nil
}

// bindProtocol fills the devices' protocol, which gives their ports' link
// layer (RDMA netlink has no per-port link layer).
func bindProtocol(devs []netlinkDevice) error {
	for i := range devs {
		proto, err := deviceProtocol(devs[i].index)
		if err != nil {
			return fmt.Errorf("RDMA device %s: %w", devs[i].name, err)
		}
		devs[i].protocol = proto
	}
	return nil
}

// queryPort asks for one port's state and netdev.
// Equivalent to: rdma link show $dev/$port
func queryPort(dev, port uint32) (netlinkPort, error) {
	req := nl.NewNetlinkRequest(nldevType(nldevCmdPortGet), unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(dev)))
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_PORT_INDEX, nl.Uint32Attr(port)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return netlinkPort{}, err
	}
	if len(msgs) != 1 {
		return netlinkPort{}, fmt.Errorf("port query answered with %d messages, want 1", len(msgs))
	}
	attrs, err := nl.ParseRouteAttr(msgs[0])
	if err != nil {
		return netlinkPort{}, fmt.Errorf("parse port answer: %w", err)
	}
	return parsePort(int(port), attrs)
}

// parsePort reads a PORT_GET answer's attributes.
func parsePort(num int, attrs []syscall.NetlinkRouteAttr) (netlinkPort, error) {
	p := netlinkPort{Port: sysfs.Port{Num: num}}
	var haveState, havePhys bool
	for _, a := range attrs {
		switch a.Attr.Type {
		case nl.RDMA_NLDEV_ATTR_PORT_STATE:
			if len(a.Value) < 1 {
				return p, errors.New("short port state attribute")
			}
			p.State, _ = sysfs.ParsePortState(fmt.Sprint(a.Value[0]))
			haveState = true
		case nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE:
			if len(a.Value) < 1 {
				return p, errors.New("short physical state attribute")
			}
			p.PhysState, _ = sysfs.ParsePhysState(fmt.Sprint(a.Value[0]))
			havePhys = true
		case nldevAttrNdevIndex:
			if len(a.Value) < 4 {
				return p, errors.New("short netdev index attribute")
			}
			p.ndevIndex = int(binary.NativeEndian.Uint32(a.Value))
		case nldevAttrNdevName:
			p.ndevName = strings.TrimRight(string(a.Value), "\x00")
		}
	}
	if !haveState || !havePhys {
		return p, errors.New("the port answer has no state")
	}
	return p, nil
}

// deviceProtocol asks for a device's protocol: "ib", "roce", "iw", …
// Equivalent to: rdma dev show $dev -d
func deviceProtocol(dev uint32) (string, error) {
	req := nl.NewNetlinkRequest(nldevType(nl.RDMA_NLDEV_CMD_GET), unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(dev)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m)
		if err != nil {
			return "", fmt.Errorf("parse device answer: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type == nldevAttrDevProtocol {
				return strings.TrimRight(string(a.Value), "\x00"), nil
			}
		}
	}
	return "", nil
}

func nldevType(cmd int) int { return nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT | cmd }

// linkLayer is a port's link layer as sysfs names it, from the device's
// protocol; without one (kernels before 5.5 do not say), from the netdev:
// IPoIB is InfiniBand.
func linkLayer(protocol string, ipoib bool) string {
	switch protocol {
	case "ib":
		return "InfiniBand"
	case "roce", "iw":
		return "Ethernet"
	case "":
		if ipoib {
			return "InfiniBand"
		}
		return "Ethernet"
	}
	return "Unknown"
}

// GUIDFromNetlink reads a GUID as vishvananda/netlink's RdmaLinkAttrs
// gives it ("c3:b2:a1:00:03:c9:02:00"): the bytes of the kernel's host-order
// u64 written little-endian, the reverse of the GUID's own byte order that
// sysfs, rdma(8) and ibstat print (0002:c903:00a1:b2c3).
func GUIDFromNetlink(s string) (sysfs.GUID, error) {
	if s == "" {
		return 0, nil
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 8 {
		return 0, fmt.Errorf("%q is not 8 colon-separated bytes", s)
	}
	return sysfs.GUID(binary.LittleEndian.Uint64(hw)), nil
}

// netlinkLooked says what RDMA netlink showed in the netns.
func (p *netnsProbe) netlinkLooked(where string, ifindex int) string {
	label := fmt.Sprintf("RDMA netlink in netns %s, a port bound to ifindex %d", where, ifindex)
	switch {
	case p.nlErr != nil:
		return fmt.Sprintf("%s: %v", label, p.nlErr)
	case len(p.bound) > 0:
		return fmt.Sprintf("%s: %s", label, p.bound[0].name)
	case len(p.listed) == 0:
		return label + ": no device in that netns"
	}
	return fmt.Sprintf("%s: none of %s", label, strings.Join(p.listed, ", "))
}

// devices turns the bound devices into Devices of the VF.
func (p *netnsProbe) devices(vf VF) []Device {
	if len(p.bound) == 0 {
		return nil
	}
	out := make([]Device, 0, len(p.bound))
	for _, d := range p.bound {
		dev := Device{RDMADevice: sysfs.RDMADevice{Name: d.name, PCI: vf.PCI, NodeGUID: d.nodeGUID, SysImageGUID: d.sysGUID},
			Source: NetnsNetlink, Netns: vf.NetnsPath}
		for _, port := range d.ports {
			port.LinkLayer = linkLayer(d.protocol, vf.IPoIB)
			dev.Ports = append(dev.Ports, port.Port)
		}
		out = append(out, dev)
	}
	return out
}
