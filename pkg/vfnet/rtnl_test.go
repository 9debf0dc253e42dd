package vfnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
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
		wantNoInet6Stats(t, c)
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

// wantNoInet6Stats checks that link requests ask the kernel to leave out
// the inet6 statistics (rtextFilterSkipStats): lo's message is shorter with
// the mask than without it, and the mask is what linkList and linkGet send.
func wantNoInet6Stats(t *testing.T, c *rtnl) {
	t.Helper()
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		t.Fatalf("the kernel has no IPv6 (needed to see its statistics left out): %v", err)
	}
	plain := ifinfomsg{family: unix.AF_UNSPEC, index: 1}.append(nil)
	full, err := c.do(unix.RTM_GETLINK, 0, plain, unix.RTM_NEWLINK)
	if err != nil || len(full) != 1 {
		t.Fatalf("get lo without a mask: %d messages, %v", len(full), err)
	}
	lean, err := c.do(unix.RTM_GETLINK, 0, appendSkipStats(plain), unix.RTM_NEWLINK)
	if err != nil || len(lean) != 1 {
		t.Fatalf("get lo with the mask: %d messages, %v", len(lean), err)
	}
	// IFLA_INET6_STATS and IFLA_INET6_ICMP6STATS are some 70 counters.
	if len(full[0])-len(lean[0]) < 300 {
		t.Errorf("lo's message is %d bytes with the mask and %d without: the statistics were not left out", len(lean[0]), len(full[0]))
	}
	// The receive buffer keeps the last reply; its header gives the size of
	// lo's message as linkGet asked for it. (A dump's last reply is its
	// NLMSG_DONE, so linkList is checked by reading its request.)
	if _, err := c.linkGet(1, ""); err != nil || int(binary.NativeEndian.Uint32(c.buf[0:4]))-unix.NLMSG_HDRLEN != len(lean[0]) {
		t.Errorf("linkGet: lo's message %d bytes, %v; want the masked %d", binary.NativeEndian.Uint32(c.buf[0:4]), err, len(lean[0]))
	}
	dump, err := c.do(unix.RTM_GETLINK, unix.NLM_F_DUMP, linkDumpRequest(), unix.RTM_NEWLINK)
	if err != nil || len(dump) != 1 || len(dump[0]) != len(lean[0]) {
		t.Errorf("linkList's request: %d messages, %v; want lo's masked %d bytes", len(dump), err, len(lean[0]))
	}
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

// netnsIno is the inode number of a netns file: equal numbers, same netns.
func netnsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// socketNetnsIno is the inode number of the netns a socket lives in.
func socketNetnsIno(t *testing.T, fd int) uint64 {
	t.Helper()
	ns, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		t.Fatalf("SIOCGSKNS: %v", err)
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestInNetnsReturnsItsThread: the handle's sockets, netlink and the one
// ethtool asks through, live in the target netns, while fn runs on a
// thread at home; and afterwards, whether fn succeeded or not, no thread of
// the process but the one that made the target is in it: a hop hands its
// thread back to the runtime only once it is home again.
func TestInNetnsReturnsItsThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make a network namespace (make test runs as root)")
	}
	ready, stop, holderDone := make(chan string), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(holderDone)
		runtime.LockOSThread() // never unlocked: this thread holds the target netns
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			close(ready)
			return
		}
		ready <- fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		<-stop
	}()
	path, ok := <-ready
	if !ok {
		t.FailNow()
	}
	defer func() { close(stop); <-holderDone }()
	holder := filepath.Base(filepath.Dir(filepath.Dir(path)))
	target := netnsIno(t, path)
	home := netnsIno(t, "/proc/thread-self/ns/net") // every thread the runtime may run fn on
	failing := errors.New("fn failed")
	for i := range 20 {
		err := InNetns(path, func(h *Handle) error {
			if got := socketNetnsIno(t, h.nl.fd); got != target {
				t.Errorf("the netlink socket is in netns %d, want the target %d", got, target)
			}
			fd, err := h.socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("socket: %v", err)
			}
			if got := socketNetnsIno(t, fd); got != target {
				t.Errorf("the ethtool socket is in netns %d, want the target %d", got, target)
			}
			unix.Close(fd)
			if got := netnsIno(t, "/proc/thread-self/ns/net"); got != home {
				t.Errorf("fn ran in netns %d, want its caller's %d", got, home)
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
		if task.Name() == holder {
			continue
		}
		ino, err := os.Stat("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread ended meanwhile
		}
		if ino.Sys().(*syscall.Stat_t).Ino == target {
			t.Errorf("thread %s is still in the target netns after InNetns returned", task.Name())
		}
	}
}
