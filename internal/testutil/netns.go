package testutil

import (
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// NetnsTB is what the namespace and stand-in makers need of a test
// (testing.TB fits, and so does the bench's).
type NetnsTB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// NewNetns makes a named network namespace removed at cleanup.
func NewNetns(tb NetnsTB) ns.NetNS {
	tb.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		tb.Fatalf("create netns: %v", err)
	}
	tb.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// RemoveNetns destroys a netns made by NewNetns now, as a pod sandbox
// teardown would; its path stops existing.
// The unmount is lazy (MNT_DETACH): a plugin being forked elsewhere holds
// every open file for a moment, and a plain unmount would fail with EBUSY.
func RemoveNetns(tb NetnsTB, n ns.NetNS) {
	tb.Helper()
	n.Close()
	if err := unix.Unmount(n.Path(), unix.MNT_DETACH); err != nil {
		tb.Fatalf("unmount netns %s: %v", n.Path(), err)
	}
	if err := os.Remove(n.Path()); err != nil {
		tb.Fatalf("remove netns %s: %v", n.Path(), err)
	}
}

// DeleteLinkIn deletes a link inside a netns.
func DeleteLinkIn(tb NetnsTB, n ns.NetNS, name string) {
	tb.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		tb.Fatalf("delete %s: %v", name, err)
	}
}

// StandIn is a veth pair standing in for one VF: Host is the end the
// chain moves into the pod (its altname is the plugin's stable name for
// PCI); the peer stays up in Wire, so the VF has carrier until the test
// takes the peer down.
type StandIn struct {
	Host    string
	PCI     string
	AltName string
	Wire    ns.NetNS
	Peer    string
}

// NewStandIn creates a stand-in in the current (private host) netns. With
// altName true it carries the stable altname, as the host's .link files
// would give it.
func NewStandIn(tb NetnsTB, host, pci string, altName bool) *StandIn {
	tb.Helper()
	wire := NewNetns(tb)
	s := &StandIn{Host: host, PCI: pci, AltName: "vf-" + config.PCIToName(pci), Wire: wire, Peer: "w" + host}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: s.Peer, PeerNamespace: netlink.NsFd(int(wire.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		tb.Fatalf("create stand-in %s: %v", host, err)
	}
	tb.Cleanup(func() {
		// Deleting the peer removes whichever end is left, wherever it is.
		_ = wire.Do(func(ns.NetNS) error {
			if l, err := netlinksafe.LinkByName(s.Peer); err == nil {
				return netlink.LinkDel(l)
			}
			return nil
		})
	})
	l, err := netlinksafe.LinkByName(host)
	if err != nil {
		tb.Fatalf("stand-in %s: %v", host, err)
	}
	if altName {
		if err := netlink.LinkAddAltName(l, s.AltName); err != nil {
			tb.Fatalf("altname on %s: %v", host, err)
		}
	}
	s.SetCarrier(tb, true)
	return s
}

// SetCarrier brings the wire end up or down, giving or taking the VF's carrier.
func (s *StandIn) SetCarrier(tb NetnsTB, up bool) {
	tb.Helper()
	err := s.Wire.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(s.Peer)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		tb.Fatalf("set carrier of %s: %v", s.Host, err)
	}
}

// LinksIn lists link names in a netns.
func LinksIn(tb NetnsTB, n ns.NetNS) []string {
	tb.Helper()
	var names []string
	err := n.Do(func(ns.NetNS) error {
		links, err := netlinksafe.LinkList()
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if err != nil {
		tb.Fatalf("list links: %v", err)
	}
	return names
}

// LinkIn returns a link by name in a netns, nil if absent.
func LinkIn(tb NetnsTB, n ns.NetNS, name string) netlink.Link {
	tb.Helper()
	var link netlink.Link
	_ = n.Do(func(ns.NetNS) error {
		link, _ = netlinksafe.LinkByName(name)
		return nil
	})
	return link
}

// RenameIn renames a link inside a netns, as udev would.
func RenameIn(tb NetnsTB, n ns.NetNS, from, to string) {
	tb.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(from)
		if err != nil {
			return err
		}
		up := l.Attrs().Flags&1 != 0
		if up {
			_ = netlink.LinkSetDown(l)
		}
		if err := netlink.LinkSetName(l, to); err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("rename %s to %s: %v", from, to, err)
	}
}

// HostLink returns a link of the current (private host) netns, nil if absent.
func HostLink(name string) netlink.Link {
	l, _ := netlinksafe.LinkByName(name)
	return l
}

// Describe is a short dump of a link for failure messages.
func Describe(l netlink.Link) string {
	if l == nil {
		return "<none>"
	}
	a := l.Attrs()
	return fmt.Sprintf("%s(mac=%s mtu=%d altnames=%s alias=%s)", a.Name, a.HardwareAddr, a.MTU, strings.Join(a.AltNames, ","), a.Alias)
}
