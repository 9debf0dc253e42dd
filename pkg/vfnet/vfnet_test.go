package vfnet_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// newNetns makes an empty network namespace (only lo in it) that lives
// until the test ends, and returns a path to it.
func newNetns(t *testing.T) (ns.NetNS, string) {
	t.Helper()
	testutil.RequireRoot(t, "makes a network namespace")
	target, err := ns.TempNetNS()
	if err != nil {
		t.Fatalf("make a netns: %v", err)
	}
	t.Cleanup(func() { _ = target.Close() })
	// TempNetNS's Path names the thread that made it, which has gone home;
	// the open file is the netns.
	return target, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), target.Fd())
}

// addVeth adds an up veth pair a/b inside target, as a VF's stand-in: it
// has no PCI parent and no bus-info.
func addVeth(t *testing.T, target ns.NetNS, a, b string) {
	t.Helper()
	err := target.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		for _, name := range []string{a, b} {
			l, err := netlinksafe.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("add veth %s/%s: %v", a, b, err)
	}
}

func netnsIno(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestInNetnsGone: a missing path, a regular file, a directory and a
// namespace of another type are all ErrNetnsGone, named in the message; fn
// never runs.
func TestInNetnsGone(t *testing.T) {
	file := t.TempDir() + "/not-a-netns"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{t.TempDir() + "/missing", file, t.TempDir(), "/proc/self/ns/mnt"} {
		err := vfnet.InNetns(path, func(*vfnet.Handle) error {
			t.Errorf("fn ran for %s", path)
			return nil
		})
		if !errors.Is(err, vfnet.ErrNetnsGone) || !strings.Contains(err.Error(), path) {
			t.Errorf("InNetns(%s) = %v, want ErrNetnsGone naming the path", path, err)
		}
	}
}

// TestInNetnsRunsAtHome: the handle reaches the target netns while fn runs
// in its caller's, and afterwards, whether fn succeeded or not and whether
// Locate asked ethtool (through ns) or not, no thread of the process is
// left in the target.
func TestInNetnsRunsAtHome(t *testing.T) {
	target, path := newNetns(t)
	addVeth(t, target, "inside0", "inside1")
	// A macvlan has no PCI parent and is not a veth: Locate asks ethtool
	// for its bus-info inside the netns.
	err := target.Do(func(ns.NetNS) error {
		parent, err := netlinksafe.LinkByName("inside1")
		if err != nil {
			return err
		}
		return netlink.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: parent.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE})
	})
	if err != nil {
		t.Fatalf("add macvlan: %v", err)
	}
	targetIno := netnsIno(t, path)
	home := netnsIno(t, "/proc/thread-self/ns/net")
	failing := errors.New("fn failed")
	for i := range 20 {
		err := vfnet.InNetns(path, func(h *vfnet.Handle) error {
			if got := netnsIno(t, "/proc/thread-self/ns/net"); got != home {
				t.Errorf("fn ran in netns %d, want its caller's %d", got, home)
			}
			if l, err := h.LinkByName("inside0"); err != nil || l == nil {
				t.Errorf("LinkByName(inside0) through the handle = %v, %v; want the target's veth", l, err)
			}
			var nf *vfnet.NotFoundError
			if _, err := h.Locate("0000:99:00.0", ""); !errors.As(err, &nf) {
				t.Errorf("Locate of an absent VF = %v, want NotFoundError", err)
			}
			if i%2 == 1 {
				return failing
			}
			return nil
		})
		var want error // errors.Is(err, nil) holds only for a nil err
		if i%2 == 1 {
			want = failing
		}
		if !errors.Is(err, want) {
			t.Errorf("InNetns #%d = %v, want %v", i, err, want)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		fi, err := os.Stat("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread ended meanwhile
		}
		if fi.Sys().(*syscall.Stat_t).Ino == targetIno {
			t.Errorf("thread %s is still in the target netns after InNetns returned", task.Name())
		}
	}
}

// TestHandle drives every change the plugin makes through a handle, in a
// real netns, on a veth standing in for the VF.
func TestHandle(t *testing.T) {
	target, path := newNetns(t)
	addVeth(t, target, "eth7", "peer7")
	const alt = "an-altname-longer-than-ifnamsiz" // looked up as IFLA_ALT_IFNAME
	err := vfnet.InNetns(path, func(h *vfnet.Handle) error {
		if h.Netns() != path {
			t.Errorf("Netns() = %q, want %q", h.Netns(), path)
		}
		l, err := h.LinkByName("eth7")
		if err != nil || l == nil {
			t.Fatalf("LinkByName(eth7) = %v, %v", l, err)
		}
		if !vfnet.HasCarrier(l) || vfnet.LinkLayer(l) != "ethernet" {
			t.Errorf("an up veth pair: carrier %v, link layer %s; want true, ethernet", vfnet.HasCarrier(l), vfnet.LinkLayer(l))
		}
		if l, err := h.LinkByName("nosuchlink"); l != nil || err != nil {
			t.Errorf("LinkByName of a missing name = %v, %v; want nil, nil", l, err)
		}
		if h.Taken(alt) || h.Taken("nosuchlink") || !h.Taken("eth7") {
			t.Errorf("Taken(%s, nosuchlink, eth7) = %v, %v, %v; want false, false, true", alt, h.Taken(alt), h.Taken("nosuchlink"), h.Taken("eth7"))
		}

		if err := h.AddAltName(l, alt); err != nil {
			t.Fatalf("AddAltName: %v", err)
		}
		if err := h.AddAltName(l, alt); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), path) {
			t.Errorf("adding the altname twice = %v, want EEXIST naming the netns", err)
		}
		if byAlt, err := h.LinkByName(alt); err != nil || byAlt == nil || byAlt.Attrs().Index != l.Attrs().Index {
			t.Errorf("LinkByName(%s) = %v, %v; want eth7", alt, byAlt, err)
		}
		if !h.Taken(alt) {
			t.Errorf("Taken(%s) = false after adding it", alt)
		}
		f, err := h.Locate("0000:18:00.2", alt)
		if err != nil || f.By != vfnet.ByAltName || f.Link.Attrs().Name != "eth7" || f.AltHolder != nil || len(f.All) != 3 {
			t.Fatalf("Locate by altname = %+v, %v; want eth7 by altname among 3 links", f, err)
		}

		if err := h.SetAlias(l, "home-name"); err != nil {
			t.Fatalf("SetAlias: %v", err)
		}
		if l, err = h.Refresh(l); err != nil || l.Attrs().Alias != "home-name" || !slices.Contains(l.Attrs().AltNames, alt) {
			t.Fatalf("Refresh after alias = %+v, %v", l, err)
		}

		// An up link is renamed and up again; a name another link holds
		// is refused and the link stays up under its old name.
		if err := h.Rename(l, "net1"); err != nil {
			t.Fatalf("Rename(eth7, net1): %v", err)
		}
		if l, err = h.Refresh(l); err != nil || l.Attrs().Name != "net1" || l.Attrs().RawFlags&unix.IFF_UP == 0 {
			t.Fatalf("after Rename: %+v, %v; want net1, up", l, err)
		}
		if err := h.Rename(l, "peer7"); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), path) {
			t.Errorf("Rename to a taken name = %v, want EEXIST naming the netns", err)
		}
		if l, err = h.Refresh(l); err != nil || l.Attrs().Name != "net1" || l.Attrs().RawFlags&unix.IFF_UP == 0 {
			t.Errorf("after a refused Rename: %+v, %v; want net1, up", l, err)
		}

		if err := h.DelAltName(l, alt); err != nil {
			t.Fatalf("DelAltName: %v", err)
		}
		if got, err := h.LinkByName(alt); got != nil || err != nil {
			t.Errorf("LinkByName of a removed altname = %v, %v; want nil, nil", got, err)
		}
		var nf *vfnet.NotFoundError
		if _, err := h.Locate("0000:18:00.2", alt); !errors.As(err, &nf) || nf.Netns != path ||
			!slices.Equal(slices.Sorted(slices.Values(nf.Present)), []string{"lo", "net1", "peer7"}) {
			t.Errorf("Locate after the altname went = %v, want NotFoundError listing lo, net1, peer7", err)
		}
		gone := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 9999, Name: "gone0"}}
		if _, err := h.Refresh(gone); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Refresh of a missing link = %v, want an error naming the netns", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("InNetns: %v", err)
	}
}

func TestFallbackName(t *testing.T) {
	for pci, want := range map[string]string{
		"0000:18:00.2": "vf18s00f2",
		"0001:af:1f.7": "vf0001afs1ff7",
	} {
		if got := vfnet.FallbackName(pci); got != want || len(got) >= unix.IFNAMSIZ {
			t.Errorf("FallbackName(%s) = %q, want %q (shorter than IFNAMSIZ)", pci, got, want)
		}
	}
}
