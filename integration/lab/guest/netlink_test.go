//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// rootNetns names the test process's own (root) netns for the helpers below.
const rootNetns = ""

// errNoVF is returned when a netns holds no link with the wanted PCI parent.
var errNoVF = errors.New("no link with that PCI parent")

// withHandle runs f with a NETLINK_ROUTE handle bound to the netns at path
// (rootNetns for the test's own), without moving any thread.
func withHandle(path string, f func(h netlinksafe.Handle) error) error {
	nsh := netns.None()
	if path != rootNetns {
		var err error
		if nsh, err = netns.GetFromPath(path); err != nil {
			return fmt.Errorf("open netns %s: %w", path, err)
		}
		defer nsh.Close()
	}
	var h netlinksafe.Handle
	var err error
	if path == rootNetns {
		h, err = netlinksafe.NewHandle(unix.NETLINK_ROUTE)
	} else {
		h, err = netlinksafe.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return fmt.Errorf("netlink handle for %q: %w", path, err)
	}
	defer h.Close()
	return f(h)
}

// linkByParent finds the link whose parent device is pci/<addr> in a netns.
// Equivalent to: ip -d link show | grep "parentbus pci parentdev $addr"
func linkByParent(path, addr string) (netlink.Link, error) {
	var found netlink.Link
	err := withHandle(path, func(h netlinksafe.Handle) error {
		links, err := linkList(h)
		if err != nil {
			return err
		}
		for _, l := range links {
			if a := l.Attrs(); a.ParentDevBus == "pci" && a.ParentDev == addr {
				found = l
				return nil
			}
		}
		return fmt.Errorf("%s in netns %q: %w (holds %s)", addr, path, errNoVF, linkNames(links))
	})
	return found, err
}

// linkList dumps a netns's links, again when a concurrent change
// interrupted the dump (NLM_F_DUMP_INTR: the list may be inconsistent), as
// it often is while other scenarios' goroutines move VFs. Stricter than
// netlinksafe, which after 5 interrupted dumps returns the last, possibly
// inconsistent, list without an error: a scenario asserting on the list
// must not see a link missing that only moved.
func linkList(h netlinksafe.Handle) ([]netlink.Link, error) {
	for range 20 {
		links, err := h.Handle.LinkList() //nolint:forbidigo // retried here, strictly: see above
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
	}
	return nil, fmt.Errorf("list links: dump interrupted 20 times: %w", netlink.ErrDumpInterrupted)
}

func linkNames(links []netlink.Link) string {
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return strings.Join(names, ",")
}

// renameLink renames a link, taking it down first as the kernel requires
// and restoring its up state. Equivalent to:
// ip link set $old down; ip link set $old name $new; ip link set $new up
func renameLink(path string, l netlink.Link, name string) error {
	return withHandle(path, func(h netlinksafe.Handle) error {
		wasUp := l.Attrs().Flags&net.FlagUp != 0
		if err := h.LinkSetDown(l); err != nil {
			return fmt.Errorf("set %s down: %w", l.Attrs().Name, err)
		}
		if err := h.LinkSetName(l, name); err != nil {
			return fmt.Errorf("rename %s to %s: %w", l.Attrs().Name, name, err)
		}
		if wasUp {
			if err := h.LinkSetUp(l); err != nil {
				return fmt.Errorf("set %s up: %w", name, err)
			}
		}
		return nil
	})
}

// setLinkUp sets a link up or down by name. Equivalent to: ip link set $name up|down
func setLinkUp(path, name string, up bool) error {
	return withHandle(path, func(h netlinksafe.Handle) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("find %s: %w", name, err)
		}
		if up {
			return h.LinkSetUp(l)
		}
		return h.LinkSetDown(l)
	})
}

// hasCarrier tells whether a link reports lower-layer up (IFF_LOWER_UP).
func hasCarrier(l netlink.Link) bool {
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
}

// delAltNames removes the given altnames from a link in a netns.
// Equivalent to: ip link property del dev $link altname $name
func delAltNames(path string, l netlink.Link, names []string) error {
	return withHandle(path, func(h netlinksafe.Handle) error {
		for _, n := range names {
			if err := h.LinkDelAltName(l, n); err != nil {
				return fmt.Errorf("delete altname %s of %s: %w", n, l.Attrs().Name, err)
			}
		}
		return nil
	})
}

func hasAltName(l netlink.Link, name string) bool {
	return slices.Contains(l.Attrs().AltNames, name)
}
