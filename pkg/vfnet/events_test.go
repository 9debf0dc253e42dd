package vfnet_test

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
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
	n, err := harness.NetlinkSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSubscribe: a subscription made in a netns hears the link changes the
// monitor acts on there (rename, altname, carrier, MTU, the link leaving),
// names the netns, holds one socket and closes it when done is closed.
func TestSubscribe(t *testing.T) {
	target, path := newNetns(t)
	addVeth(t, target, "vf0", "peer0")
	before := sockets(t)
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	id, err := vfnet.Subscribe(path, ch, done, func(err error) {})
	if err != nil {
		t.Fatal(err)
	}
	if want, err := vfnet.NetnsIDOf(path); err != nil || id != want || id.IsZero() {
		t.Errorf("Subscribe's netns ID %v, NetnsIDOf %v (%v): want equal and not zero", id, want, err)
	}
	if got := sockets(t); got != before+1 {
		t.Errorf("%d netlink sockets while subscribed, want %d", got, before+1)
	}
	in := func(f func() error) {
		t.Helper()
		if err := target.Do(func(ns.NetNS) error { return f() }); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name string) netlink.Link {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	in(func() error { l := link("vf0"); _ = netlink.LinkSetDown(l); return netlink.LinkSetName(l, "eth9") })
	nextUpdate(t, ch, "the rename", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" })
	// The kernel announces an altname change only on an up link
	// (netdev_state_change): a down VF's altname is the sweep's.
	in(func() error { return netlink.LinkSetUp(link("eth9")) })
	in(func() error { return netlink.LinkAddAltName(link("eth9"), "vf-0000-18-00.2") })
	nextUpdate(t, ch, "the altname", func(u netlink.LinkUpdate) bool { return slices.Contains(u.Attrs().AltNames, "vf-0000-18-00.2") })
	in(func() error { return netlink.LinkSetMTU(link("eth9"), 1400) })
	nextUpdate(t, ch, "the MTU", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" && u.Attrs().MTU == 1400 })
	in(func() error { return netlink.LinkSetDown(link("peer0")) })
	nextUpdate(t, ch, "the carrier drop", func(u netlink.LinkUpdate) bool { return u.Attrs().Name == "eth9" && !vfnet.HasCarrier(u.Link) })
	in(func() error { return netlink.LinkDel(link("eth9")) })
	nextUpdate(t, ch, "the link leaving", func(u netlink.LinkUpdate) bool { return u.Header.Type == 17 /* RTM_DELLINK */ })

	close(done)
	for range ch { // closed once the socket is
	}
	deadline := time.Now().Add(5 * time.Second)
	for sockets(t) != before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := sockets(t); got != before {
		t.Errorf("%d netlink sockets after done was closed, want %d", got, before)
	}

	if _, err := vfnet.Subscribe(t.TempDir()+"/gone", ch, done, nil); !errors.Is(err, vfnet.ErrNetnsGone) {
		t.Errorf("Subscribe to a missing netns = %v, want ErrNetnsGone", err)
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
