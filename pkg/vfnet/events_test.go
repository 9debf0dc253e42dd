package vfnet_test

import (
	"errors"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// nextUpdate waits for a notification about the link named or indexed as
// want, skipping others.
func nextUpdate(t *testing.T, ch <-chan netlink.LinkUpdate, what string, match func(netlink.LinkUpdate) bool) netlink.LinkUpdate {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u, ok := <-ch:
			if !ok {
				t.Fatalf("subscription ended while waiting for %s", what)
			}
			if match(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no notification of %s within 5s", what)
		}
	}
}

func sockets(t *testing.T) int {
	t.Helper()
	n, err := testutil.NetlinkSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// watch opens a LinkWatch on path whose updates and errors go to channels.
func watch(t *testing.T, path string) (*vfnet.LinkWatch, <-chan netlink.LinkUpdate, <-chan error, <-chan error) {
	t.Helper()
	updates, errs, ended := make(chan netlink.LinkUpdate, 64), make(chan error, 64), make(chan error, 1)
	w, err := vfnet.WatchLinks(path, func(u netlink.LinkUpdate) { updates <- u }, func(err error) { errs <- err }, func(err error) { ended <- err })
	if err != nil {
		t.Fatal(err)
	}
	return w, updates, errs, ended
}

// TestWatchLinks: a watch made in a netns hears the link changes the
// monitor acts on there (rename, altname, carrier, MTU, the link leaving),
// answers what it is asked about a link, names the netns, holds one socket
// and closes it on Close.
func TestWatchLinks(t *testing.T) {
	target, path := newNetns(t)
	addVeth(t, target, "vf0", "peer0")
	before := sockets(t)
	w, ch, errs, ended := watch(t, path)
	if want, err := vfnet.NetnsIDOf(path); err != nil || w.ID() != want || w.ID().IsZero() {
		t.Errorf("the watch's netns ID %v, NetnsIDOf %v (%v): want equal and not zero", w.ID(), want, err)
	}
	if got := sockets(t); got != before+1 {
		t.Errorf("%d netlink sockets while watching, want %d", got, before+1)
	}
	in := func(f func() error) {
		t.Helper()
		if err := target.Do(func(ns.NetNS) error { return f() }); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name string) netlink.Link {
		l, err := netlinksafe.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var idx int
	in(func() error {
		l := link("vf0")
		idx = l.Attrs().Index
		_ = netlink.LinkSetDown(l)
		return netlink.LinkSetName(l, "eth9")
	})
	nextUpdate(t, ch, "the rename", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" })
	// The kernel announces an altname change only on an up link
	// (netdev_state_change); on a down one, only asking finds it.
	in(func() error { return netlink.LinkAddAltName(link("eth9"), "vf-0000-18-00.2") })
	if err := w.Ask(idx); err != nil {
		t.Fatal(err)
	}
	nextUpdate(t, ch, "the answer with the altname", func(u netlink.LinkUpdate) bool { return slices.Contains(u.Attrs().AltNames, "vf-0000-18-00.2") })
	in(func() error { return netlink.LinkSetUp(link("eth9")) })
	in(func() error { return netlink.LinkDelAltName(link("eth9"), "vf-0000-18-00.2") })
	nextUpdate(t, ch, "the altname gone", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" && len(u.Attrs().AltNames) == 0 })
	in(func() error { return netlink.LinkSetMTU(link("eth9"), 1400) })
	nextUpdate(t, ch, "the MTU", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" && u.Attrs().MTU == 1400 })
	in(func() error { return netlink.LinkSetDown(link("peer0")) })
	nextUpdate(t, ch, "the carrier drop", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" && !vfnet.HasCarrier(u.Link) })
	in(func() error { return netlink.LinkDel(link("eth9")) })
	nextUpdate(t, ch, "the link leaving", func(u netlink.LinkUpdate) bool { return u.Header.Type == 17 /* RTM_DELLINK */ })
	if err := w.Ask(idx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, syscall.ENODEV) {
			t.Errorf("asking for a link that left: %v, want ENODEV", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("no answer to asking for a link that left")
	}

	w.Close()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the watch ended with %v after Close, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end within 5s of Close")
	}
	if got := sockets(t); got != before {
		t.Errorf("%d netlink sockets after Close, want %d", got, before)
	}
	if _, err := vfnet.WatchLinks(t.TempDir()+"/gone", nil, nil, nil); !errors.Is(err, vfnet.ErrNetnsGone) {
		t.Errorf("WatchLinks on a missing netns = %v, want ErrNetnsGone", err)
	}
}

// TestNetnsIDs: a netns has one ID by path and by handle, another netns
// another; a missing path is gone.
func TestNetnsIDs(t *testing.T) {
	_, a := newNetns(t)
	_, b := newNetns(t)
	idA, errA := vfnet.NetnsIDOf(a)
	idB, errB := vfnet.NetnsIDOf(b)
	if errA != nil || errB != nil || idA == idB {
		t.Fatalf("IDs %v (%v) and %v (%v): want two different ones", idA, errA, idB, errB)
	}
	err := vfnet.InNetns(a, func(h *vfnet.Handle) error {
		id, err := h.NetnsID()
		if err != nil || id != idA {
			t.Errorf("handle's ID %v (%v), want %v", id, err, idA)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !vfnet.NetnsAlive(a) || vfnet.NetnsAlive(t.TempDir()) {
		t.Error("NetnsAlive: want true for a netns, false for a directory")
	}
	if _, err := vfnet.NetnsIDOf(t.TempDir() + "/gone"); !errors.Is(err, vfnet.ErrNetnsGone) {
		t.Errorf("NetnsIDOf of a missing path = %v, want ErrNetnsGone", err)
	}
}

// TestLocateLastSeen: a link without bus identity and without its altname
// is the VF only at the index it had, with the MAC it had.
func TestLocateLastSeen(t *testing.T) {
	target, path := newNetns(t)
	addVeth(t, target, "net1", "peer1")
	err := vfnet.InNetns(path, func(h *vfnet.Handle) error {
		l, err := h.LinkByName("net1")
		if err != nil {
			return err
		}
		idx, mac := l.Attrs().Index, l.Attrs().HardwareAddr.String()
		f, err := h.LocateLastSeen("0000:18:00.2", "vf-0000-18-00.2", idx, mac)
		if err != nil || f.By != vfnet.ByLastIndex || f.Link.Attrs().Index != idx {
			t.Errorf("LocateLastSeen at its index and MAC = %+v, %v; want net1 by last index", f, err)
		}
		var nf *vfnet.NotFoundError
		for _, c := range []struct {
			idx int
			mac string
		}{{idx, "02:00:00:00:00:99"}, {idx + 100, mac}, {0, mac}} {
			if _, err := h.LocateLastSeen("0000:18:00.2", "vf-0000-18-00.2", c.idx, c.mac); !errors.As(err, &nf) {
				t.Errorf("LocateLastSeen(index %d, mac %s) = %v, want NotFoundError", c.idx, c.mac, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
