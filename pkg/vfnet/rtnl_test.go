package vfnet

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// inPrivateNetns runs fn on a thread in a fresh network namespace (only
// lo in it); the thread is never unlocked, so it ends with fn's goroutine.
func inPrivateNetns(t *testing.T, fn func(*rtnl)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make a network namespace (make test runs as root)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		c, err := dialRtnl()
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		defer c.close()
		fn(c)
	}()
	<-done
}

// TestRtnlRequests drives every request the handle speaks against a real
// kernel in a private netns: dump, get by name, index and altname, flags,
// rename, alias and altnames, and the errors the callers rely on.
func TestRtnlRequests(t *testing.T) {
	inPrivateNetns(t, func(c *rtnl) {
		links, err := c.linkList()
		if err != nil || len(links) != 1 || links[0].Attrs().Name != "lo" {
			t.Fatalf("linkList in a new netns = %v, %v; want just lo", links, err)
		}
		lo := links[0]
		if _, err := c.linkGet(0, "nosuchlink"); !errors.Is(err, unix.ENODEV) {
			t.Errorf("linkGet of a missing name: %v, want ENODEV", err)
		}
		const alt = "an-altname-longer-than-ifnamsiz"
		if err := c.altName(unix.RTM_NEWLINKPROP, lo.Attrs().Index, alt); err != nil {
			t.Fatalf("add altname: %v", err)
		}
		if err := c.altName(unix.RTM_NEWLINKPROP, lo.Attrs().Index, alt); !errors.Is(err, unix.EEXIST) {
			t.Errorf("adding it twice: %v, want EEXIST", err)
		}
		byAlt, err := c.linkGet(0, alt)
		if err != nil || byAlt.Attrs().Index != lo.Attrs().Index || !slices.Contains(byAlt.Attrs().AltNames, alt) {
			t.Fatalf("linkGet by altname = %v, %v", byAlt, err)
		}
		if err := c.linkSet(lo.Attrs().Index, 0, 0, rtattr{unix.IFLA_IFALIAS, []byte("home-name")}); err != nil {
			t.Fatalf("set alias: %v", err)
		}
		if err := c.linkSet(lo.Attrs().Index, unix.IFF_UP, unix.IFF_UP); err != nil {
			t.Fatalf("set up: %v", err)
		}
		got, err := c.linkGet(lo.Attrs().Index, "")
		if err != nil || got.Attrs().Alias != "home-name" || got.Attrs().RawFlags&unix.IFF_UP == 0 {
			t.Fatalf("linkGet by index after alias and up = %+v, %v", got, err)
		}
		if err := c.linkSet(lo.Attrs().Index, 0, unix.IFF_UP); err != nil {
			t.Fatalf("set down: %v", err)
		}
		if err := c.linkSet(lo.Attrs().Index, 0, 0, rtattr{unix.IFLA_IFNAME, cString("renamed0")}); err != nil {
			t.Fatalf("rename: %v", err)
		}
		if got, err := c.linkGet(0, "renamed0"); err != nil || got.Attrs().RawFlags&unix.IFF_UP != 0 {
			t.Errorf("after down and rename: %v, %v", got, err)
		}
		if err := c.altName(unix.RTM_DELLINKPROP, lo.Attrs().Index, alt); err != nil {
			t.Fatalf("del altname: %v", err)
		}
		if _, err := c.linkGet(0, alt); !errors.Is(err, unix.ENODEV) {
			t.Errorf("linkGet of a removed altname: %v, want ENODEV", err)
		}
		if err := c.linkSet(9999, 0, 0, rtattr{unix.IFLA_IFNAME, cString("x")}); !errors.Is(err, unix.ENODEV) {
			t.Errorf("set on a missing index: %v, want ENODEV", err)
		}
	})
}

// TestRtnlTruncatedReply gives the socket a buffer smaller than one link
// message: the reply is truncated, the buffer grows and the request is
// sent again, for a dump and for a get.
func TestRtnlTruncatedReply(t *testing.T) {
	inPrivateNetns(t, func(c *rtnl) {
		c.buf = make([]byte, 64)
		links, err := c.linkList()
		if err != nil || len(links) != 1 {
			t.Fatalf("linkList with a 64-byte buffer = %v, %v", links, err)
		}
		if len(c.buf) <= 64 {
			t.Errorf("buffer did not grow: %d bytes", len(c.buf))
		}
		c.buf = make([]byte, 64)
		if l, err := c.linkGet(0, "lo"); err != nil || l.Attrs().Name != "lo" {
			t.Fatalf("linkGet with a 64-byte buffer = %v, %v", l, err)
		}
		// A later request on the same socket is not confused by what the
		// retries left behind.
		if l, err := c.linkGet(1, ""); err != nil || l.Attrs().Name != "lo" {
			t.Fatalf("linkGet after the retries = %v, %v", l, err)
		}
	})
}

// TestInNetnsGone: a missing path and a file that is not a netns are both
// ErrNetnsGone; fn never runs.
func TestInNetnsGone(t *testing.T) {
	file := t.TempDir() + "/not-a-netns"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{t.TempDir() + "/missing", file, t.TempDir()} {
		err := InNetns(path, func(*Handle) error {
			t.Errorf("fn ran for %s", path)
			return nil
		})
		if !errors.Is(err, ErrNetnsGone) {
			t.Errorf("InNetns(%s) = %v, want ErrNetnsGone", path, err)
		}
	}
}
