package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

func newNetns(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		if err := testutils.UnmountNS(n); err != nil {
			t.Errorf("unmount netns: %v", err)
		}
	})
	return n
}

// TestNetnsSysfsShowsItsNetns proves the mechanism the exclusive-mode
// lookup rests on: a sysfs instance whose context was made inside a netns
// shows that netns's network-namespaced classes (here class/net: a link
// made there, none of the host's), from whatever thread reads it, without
// mounting anything in any mount namespace. infiniband is namespaced the
// same way; the lab shows it with a real RDMA device.
func TestNetnsSysfsShowsItsNetns(t *testing.T) {
	requireRoot(t)
	pod := newNetns(t)
	const name = "sysfsprobe0"
	err := pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var fsfd int
	var ferr error
	if err := pod.Do(func(ns.NetNS) error { fsfd, ferr = openSysfsContext(); return nil }); err != nil || ferr != nil {
		t.Fatalf("make a sysfs context in the netns: %v, %v", err, ferr)
	}
	mount, err := mountContext(fsfd)
	if err != nil {
		t.Fatal(err)
	}
	defer mount.Close()
	root := fmt.Sprintf("/proc/self/fd/%d", mount.Fd())
	entries, err := os.ReadDir(root + "/class/net")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "lo "+name+" "+name+"p" {
		t.Errorf("the netns's sysfs lists class/net %v, want lo and the veth pair made there", names)
	}
	if _, err := os.Stat("/sys/class/net/" + name); err == nil {
		t.Errorf("the host's sysfs shows %s too", name)
	}
	// Read-only: a write into it fails.
	if err := os.WriteFile(root+"/class/net/"+name+"/mtu", []byte("1400"), 0); err == nil {
		t.Error("a write through the netns's sysfs instance succeeded; it is mounted read-only")
	}
}

// TestFindInNetns runs the exclusive-mode path end to end on a netns that
// holds no RDMA device: the host's view is empty, the PF says the VF has a
// device, so the netns is searched and every place is named; the same
// through ns.Do (the agent) and on the caller's locked thread (the plugin).
func TestFindInNetns(t *testing.T) {
	requireRoot(t)
	for _, locked := range []bool{false, true} {
		t.Run(fmt.Sprintf("ThreadLocked=%v", locked), func(t *testing.T) {
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			tree, pf, vf0, _ := node(t)
			tree.HideRDMA(vf0, "mlx5_10")
			pod := newNetns(t)
			l, err := Finder{Sys: sysfs.Reader{Root: tree.Root}, ThreadLocked: locked}.Find(VF{PCI: vf0, PF: pf, Netns: pod, NetnsPath: pod.Path(), IfIndex: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := []string{"host sysfs " + filepath.Join(tree.Root, "bus/pci/devices", vf0, "infiniband") + ": empty",
				"sysfs of netns " + pod.Path() + " at bus/pci/devices/" + vf0 + "/infiniband: empty",
				"RDMA netlink: not asked, ib_core is not loaded (no " + filepath.Join(tree.Root, "module/ib_core") + ")"}
			if len(l.Devices) != 0 || strings.Join(l.Looked, "\n") != strings.Join(want, "\n") {
				t.Errorf("devices %+v, looked %q; want none and %q", l.Devices, l.Looked, want)
			}
			if l.mount != nil {
				t.Error("the netns's sysfs instance is kept open though nothing was found in it")
			}
		})
	}
}

// TestInOnLockedThread: with ThreadLocked, the call runs on the caller's
// own thread inside the netns (its /proc/thread-self/ns/net is the pod's)
// and the thread is back in its own netns afterwards.
func TestInOnLockedThread(t *testing.T) {
	requireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pod := newNetns(t)
	nsIno := func(path string) uint64 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	own, podIno := nsIno("/proc/thread-self/ns/net"), nsIno(pod.Path())
	tid := unix.Gettid()
	var inside uint64
	var insideTid int
	if err := (Finder{ThreadLocked: true}).in(pod, func() { inside, insideTid = nsIno("/proc/thread-self/ns/net"), unix.Gettid() }); err != nil {
		t.Fatal(err)
	}
	if inside != podIno || insideTid != tid {
		t.Errorf("the call ran in netns %d on thread %d; want the pod's %d on the caller's %d", inside, insideTid, podIno, tid)
	}
	if after := nsIno("/proc/thread-self/ns/net"); after != own {
		t.Errorf("the thread is in netns %d afterwards, want its own %d", after, own)
	}
}

// BenchmarkFindInNetns is ADD's exclusive-mode search for a VF whose
// device is in no view: the host's sysfs, then a sysfs instance of the
// pod's netns (no ib_core here, so no RDMA netlink).
func BenchmarkFindInNetns(b *testing.B) {
	testutil.RequireRoot(b, "makes a network namespace")
	tree, pf, vf0, _ := node(b)
	tree.HideRDMA(vf0, "mlx5_10")
	pod := newNetns(b)
	f := Finder{Sys: sysfs.Reader{Root: tree.Root}}
	for b.Loop() {
		l, err := f.Find(VF{PCI: vf0, PF: pf, Netns: pod, NetnsPath: pod.Path(), IfIndex: 1})
		if err != nil || len(l.Devices) != 0 {
			b.Fatal(err)
		}
		l.Close()
	}
}

func requireRoot(t *testing.T) {
	testutil.RequireRoot(t, "makes network namespaces and sysfs instances in them")
}
