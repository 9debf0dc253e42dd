//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sysfsGUIDFormat is node_guid as sysfs shows it.
var sysfsGUIDFormat = regexp.MustCompile(`^[0-9a-f]{4}(:[0-9a-f]{4}){3}$`)

// TestLabRDMA00Module proves the lab's fake InfiniBand provider, sst_ib,
// behaves as a real provider on the guest's real ib_core, under two igbvf
// VFs and a PF, in shared and then in exclusive netns mode: each device sits
// at <pci>/infiniband/<name>/ with its node GUID, an ACTIVE/LinkUp
// InfiniBand port and GID 0 = fe80:: + GUID; a port state or GUID written to
// the module's parameters shows at once; RDMA netlink lists the device with
// the GUID's bytes reversed (vishvananda/netlink's NodeGuid); `rdma dev`
// agrees with sysfs. In exclusive mode a device moved into a pod netns
// leaves the host's view, shows in RDMA netlink and in a sysfs mounted from
// that netns, and comes back when the netns is deleted; sst_ib unloads
// cleanly with a device still in a pod. Removing a PF's VFs takes their
// devices away and leaves the PF's. The kernel logs no warning throughout.
func TestLabRDMA00Module(t *testing.T) {
	newEnv(t) // the lab's hygiene, last
	noKernelTrouble(t)
	p := theLab.PFs[0]
	devs := []testIBDev{
		{PCI: p.VFs[0].PCI, NodeGUID: 0x0002c90300a1b2c3, PortActive: true},
		{PCI: p.VFs[1].PCI, NodeGUID: 0, PortActive: true}, // unassigned, as a fresh VF's
		{PCI: p.PCI, NodeGUID: 0x0002c90300a1b2c0, PortActive: true},
	}
	t.Run("shared", func(t *testing.T) {
		loadIBCore(t, false)
		names := loadTestIB(t, devs)
		checkProvider(t, devs, names)
	})
	t.Run("exclusive", func(t *testing.T) {
		loadIBCore(t, true)
		names := loadTestIB(t, devs)
		checkProvider(t, devs, names)
		checkMoveToPod(t, devs[0], names[0])
		checkUnloadWhileInPod(t, devs[1], names[1])
	})
	t.Run("vf-removal", func(t *testing.T) {
		loadIBCore(t, false)
		checkVFRemoval(t, theLab.PFs[len(theLab.PFs)-1])
	})
}

// checkProvider checks every device's sysfs files, RDMA netlink and the
// rdma tool, then that port state and GUID writes show at once.
func checkProvider(t *testing.T, devs []testIBDev, names []string) {
	t.Helper()
	for i, d := range devs {
		dir := filepath.Join(sysPCI, d.PCI, "infiniband", names[i])
		guid := sysfsGUID(d.NodeGUID)
		got := wantSysfs(t, filepath.Join(dir, "node_guid"), guid)
		if !sysfsGUIDFormat.MatchString(got) {
			t.Errorf("%s/node_guid %q is not in sysfs GUID form", dir, got)
		}
		wantPort(t, dir, true)
		wantSysfs(t, filepath.Join(dir, "ports/1/link_layer"), "InfiniBand")
		wantSysfs(t, filepath.Join(dir, "ports/1/gids/0"), "fe80:0000:0000:0000:"+guid)
		wantNetlinkGUID(t, names[i], guid)
		r := run(t, nil, "rdma", "dev", "show", names[i])
		if r.code != 0 || !strings.Contains(r.stdout, "node_guid "+guid) {
			t.Errorf("rdma dev show %s (exit %d): %q, want node_guid %s", names[i], r.code, r.stdout, guid)
		}
		t.Logf("%s: %s under %s, node_guid %s", names[i], dir, d.PCI, guid)
	}

	dir := filepath.Join(sysPCI, devs[0].PCI, "infiniband", names[0])
	setPortActive(t, 0, false)
	wantPort(t, dir, false)
	setPortActive(t, 0, true)
	wantPort(t, dir, true)

	const newGUID = 0x0002c90300a1b2c4
	dir = filepath.Join(sysPCI, devs[1].PCI, "infiniband", names[1])
	setNodeGUID(t, 1, newGUID)
	wantSysfs(t, filepath.Join(dir, "node_guid"), sysfsGUID(newGUID))
	wantNetlinkGUID(t, names[1], sysfsGUID(newGUID))
	// ib_core refreshes its GID cache from a work item the GID_CHANGE event queues.
	wantSysfsSoon(t, filepath.Join(dir, "ports/1/gids/0"), "fe80:0000:0000:0000:"+sysfsGUID(newGUID))
	setNodeGUID(t, 1, devs[1].NodeGUID)
	wantSysfs(t, filepath.Join(dir, "node_guid"), sysfsGUID(devs[1].NodeGUID))
}

// wantPort checks port 1's logical and physical state.
func wantPort(t *testing.T, dir string, active bool) {
	t.Helper()
	state, phys := "4: ACTIVE", "5: LinkUp"
	if !active {
		state, phys = "1: DOWN", "3: Disabled"
	}
	wantSysfs(t, filepath.Join(dir, "ports/1/state"), state)
	wantSysfs(t, filepath.Join(dir, "ports/1/phys_state"), phys)
}

// wantSysfs checks a sysfs file's content (without its newline) and
// returns it.
func wantSysfs(t *testing.T, path, want string) string {
	t.Helper()
	got, err := readTrimmed(path)
	if err != nil {
		t.Error(err)
	} else if got != want {
		t.Errorf("%s = %q, want %q", path, got, want)
	}
	return got
}

// wantSysfsSoon waits up to 10 s for a sysfs file to show a value.
func wantSysfsSoon(t *testing.T, path, want string) {
	t.Helper()
	err := poll(10*time.Second, func() error {
		got, err := readTrimmed(path)
		if err == nil && got != want {
			err = fmt.Errorf("%s = %q, want %q", path, got, want)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// netlinkGUID is what vishvananda/netlink's RdmaLinkAttrs.NodeGuid holds for
// a GUID sysfs shows as 0002:c903:00a1:b2c3: the same eight bytes in the
// opposite order, c3:b2:a1:00:03:c9:02:00.
func netlinkGUID(sysfs string) string {
	hex := strings.ReplaceAll(sysfs, ":", "")
	var bytes []string
	for i := 0; i+2 <= len(hex); i += 2 {
		bytes = append(bytes, hex[i:i+2])
	}
	slices.Reverse(bytes)
	return strings.Join(bytes, ":")
}

// wantNetlinkGUID checks that the test's netns lists the device over RDMA
// netlink with the GUID sysfs shows, in netlink's byte order.
func wantNetlinkGUID(t *testing.T, name, sysfs string) {
	t.Helper()
	l, err := rdmaLinkIn(rootNetns, name)
	if err != nil {
		t.Error(err)
		return
	}
	if want := netlinkGUID(sysfs); l.Attrs.NodeGuid != want {
		t.Errorf("RDMA netlink: %s NodeGuid %q, want %q (sysfs %s, bytes reversed)", name, l.Attrs.NodeGuid, want, sysfs)
	}
}

// errNoRDMADev is returned when a netns's RDMA netlink does not list a device.
var errNoRDMADev = errors.New("no such RDMA device")

// rdmaLinks dumps the RDMA devices a netns sees, with a NETLINK_RDMA socket
// opened in it, and how long the dump took.
// Equivalent to: ip netns exec $ns rdma dev show
func rdmaLinks(path string) ([]*netlink.RdmaLink, time.Duration, error) {
	nsh := netns.None()
	var h netlinksafe.Handle
	var err error
	if path == rootNetns {
		h, err = netlinksafe.NewHandle(unix.NETLINK_RDMA)
	} else {
		if nsh, err = netns.GetFromPath(path); err != nil {
			return nil, 0, fmt.Errorf("open netns %s: %w", path, err)
		}
		defer nsh.Close()
		h, err = netlinksafe.NewHandleAt(nsh, unix.NETLINK_RDMA)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("RDMA netlink handle in netns %q: %w", path, err)
	}
	defer h.Close()
	start := time.Now()
	links, err := h.RdmaLinkList()
	took := time.Since(start)
	if err != nil {
		return nil, took, fmt.Errorf("RDMA device dump in netns %q: %w", path, err)
	}
	return links, took, nil
}

// rdmaLinkIn finds an RDMA device by name in a netns's RDMA netlink dump.
func rdmaLinkIn(path, name string) (*netlink.RdmaLink, error) {
	links, _, err := rdmaLinks(path)
	if err != nil {
		return nil, err
	}
	var seen []string
	for _, l := range links {
		if l.Attrs.Name == name {
			return l, nil
		}
		seen = append(seen, l.Attrs.Name)
	}
	return nil, fmt.Errorf("%s in netns %q: %w (lists %v)", name, path, errNoRDMADev, seen)
}

// moveRDMADev moves an RDMA device from the test's netns into a pod's.
// Equivalent to: rdma dev set $name netns $pod
func moveRDMADev(t *testing.T, name string, p *pod) {
	t.Helper()
	err := withRDMAHandle(func(h netlinksafe.Handle) error {
		l, err := h.RdmaLinkByName(name)
		if err != nil {
			return err
		}
		return h.RdmaLinkSetNsFd(l, uint32(p.ns.Fd()))
	})
	if err != nil {
		t.Fatalf("move %s into %s: %v", name, p, err)
	}
}

// checkMoveToPod moves a device into a pod netns (exclusive mode) and checks
// the host's and the pod's views, then deletes the netns and waits for
// ib_core to bring the device back.
func checkMoveToPod(t *testing.T, d testIBDev, name string) {
	t.Helper()
	p := newPod(t, "rdma")
	moveRDMADev(t, name, p)

	// The host: an existing, empty infiniband/ under the VF; nothing in the
	// class directory or in its RDMA netlink.
	hostDir := filepath.Join(sysPCI, d.PCI, "infiniband")
	entries, err := os.ReadDir(hostDir)
	if err != nil {
		t.Errorf("host: %v", err)
	} else if len(entries) != 0 {
		t.Errorf("host: %s holds %d entries with %s in %s, want none", hostDir, len(entries), name, p)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/infiniband", name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("host: /sys/class/infiniband/%s with the device in %s: %v, want it absent", name, p, err)
	}
	if _, err := rdmaLinkIn(rootNetns, name); !errors.Is(err, errNoRDMADev) {
		t.Errorf("host RDMA netlink with %s in %s: %v, want %v", name, p, err, errNoRDMADev)
	}

	// The pod, through RDMA netlink.
	links, took, err := rdmaLinks(p.Path())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(links, func(l *netlink.RdmaLink) bool { return l.Attrs.Name == name })
	if i < 0 {
		t.Errorf("RDMA netlink in %s lists %d devices, not %s", p, len(links), name)
	} else if want := netlinkGUID(sysfsGUID(d.NodeGUID)); links[i].Attrs.NodeGuid != want {
		t.Errorf("RDMA netlink in %s: NodeGuid %q, want %q", p, links[i].Attrs.NodeGuid, want)
	}
	t.Logf("RDMA netlink dump in the pod netns: %d devices in %s", len(links), took.Round(time.Microsecond))

	// The pod, through a sysfs mounted from its netns.
	checkPodSysfs(t, p, d, name)

	// ib_core brings a device home when its netns goes away.
	start := time.Now()
	if err := p.vanish(); err != nil {
		t.Fatal(err)
	}
	err = poll(60*time.Second, func() error {
		got, err := ibDevOf(d.PCI)
		if err == nil && got != name {
			err = fmt.Errorf("%s came back as %s", name, got)
		}
		if err == nil {
			_, err = rdmaLinkIn(rootNetns, name)
		}
		return err
	})
	if err != nil {
		t.Fatalf("after deleting %s: %v", p, err)
	}
	t.Logf("%s back on the host %s after its netns was deleted", name, time.Since(start).Round(time.Millisecond))
	wantSysfs(t, filepath.Join(sysPCI, d.PCI, "infiniband", name, "node_guid"), sysfsGUID(d.NodeGUID))
}

// checkPodSysfs mounts a sysfs instance tagged with the pod's netns with
// the new mount API, without touching any mount namespace: fsopen on a
// thread inside the netns (sysfs takes the netns of the fsopen caller),
// then fsconfig and fsmount from anywhere; the detached mount is read
// through /proc/self/fd. It must show the device, its GUID and its port.
func checkPodSysfs(t *testing.T, p *pod, d testIBDev, name string) {
	t.Helper()
	start := time.Now()
	target, err := ns.GetNS(p.Path())
	if err != nil {
		t.Fatal(err)
	}
	var fsfd int
	err = target.Do(func(ns.NetNS) (err error) {
		fsfd, err = unix.Fsopen("sysfs", unix.FSOPEN_CLOEXEC)
		return err
	})
	target.Close()
	if err != nil {
		t.Fatalf("fsopen sysfs in %s: %v", p, err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		t.Fatalf("fsconfig create of sysfs from %s: %v", p, err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("fsmount sysfs from %s: %v", p, err)
	}
	defer unix.Close(mfd)
	took := time.Since(start)

	dir := filepath.Join("/proc/self/fd", strconv.Itoa(mfd), "bus/pci/devices", d.PCI, "infiniband", name)
	wantSysfs(t, filepath.Join(dir, "node_guid"), sysfsGUID(d.NodeGUID))
	wantPort(t, dir, true)
	setPortActive(t, 0, false)
	wantPort(t, dir, false)
	setPortActive(t, 0, true)
	if _, err := os.Stat(filepath.Join("/proc/self/fd", strconv.Itoa(mfd), "class/infiniband", name)); err != nil {
		t.Errorf("the pod's sysfs lacks class/infiniband/%s: %v", name, err)
	}
	t.Logf("sysfs of the pod netns (fsopen in it, fsconfig, fsmount) in %s: %s shows %s", took.Round(time.Microsecond), dir, name)
}

// checkUnloadWhileInPod moves a device into a pod netns and unloads sst_ib
// with it there: ib_core must unregister it cleanly (noKernelTrouble checks
// the kernel log) and the pod must no longer list it.
func checkUnloadWhileInPod(t *testing.T, d testIBDev, name string) {
	t.Helper()
	p := newPod(t, "rdma-unload")
	moveRDMADev(t, name, p)
	if _, err := rdmaLinkIn(p.Path(), name); err != nil {
		t.Fatal(err)
	}
	if err := rmmod("sst_ib"); err != nil {
		t.Fatalf("unload sst_ib with %s in %s: %v", name, p, err)
	}
	if _, err := rdmaLinkIn(p.Path(), name); !errors.Is(err, errNoRDMADev) {
		t.Errorf("RDMA netlink in %s after sst_ib was unloaded: %v, want %v", p, err, errNoRDMADev)
	}
	if entries, err := os.ReadDir(filepath.Join(sysPCI, d.PCI, "infiniband")); err == nil && len(entries) > 0 {
		t.Errorf("host: %s/infiniband still holds %d entries after sst_ib was unloaded", d.PCI, len(entries))
	}
}

// checkVFRemoval registers devices under a VF and its PF, then removes the
// PF's VFs, as a node's SR-IOV reconfiguration does: the VF's device must go
// (sst_ib unregisters it before its parent goes away, as a real driver's
// remove does), the PF's must stay. The VFs are created again afterwards.
// Equivalent to: echo 0 > /sys/bus/pci/devices/$pf/sriov_numvfs
func checkVFRemoval(t *testing.T, p pf) {
	t.Helper()
	devs := []testIBDev{
		{PCI: p.VFs[0].PCI, NodeGUID: 0x0002c90300a1b2d1, PortActive: true},
		{PCI: p.PCI, NodeGUID: 0x0002c90300a1b2d0, PortActive: true},
	}
	names := loadTestIB(t, devs)
	t.Cleanup(func() {
		if err := theLab.reload(); err != nil {
			t.Errorf("hygiene: VFs of %s after their removal: %v", p.PCI, err)
		}
	})
	start := time.Now()
	if err := os.WriteFile(filepath.Join(sysPCI, p.PCI, "sriov_numvfs"), []byte("0"), 0); err != nil {
		t.Fatalf("remove the VFs of %s: %v", p.PCI, err)
	}
	t.Logf("removed the VFs of %s in %s", p.PCI, time.Since(start).Round(time.Millisecond))
	if _, err := rdmaLinkIn(rootNetns, names[0]); !errors.Is(err, errNoRDMADev) {
		t.Errorf("RDMA netlink after %s was removed: %v, want %v", devs[0].PCI, err, errNoRDMADev)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/infiniband", names[0])); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/sys/class/infiniband/%s after %s was removed: %v, want it absent", names[0], devs[0].PCI, err)
	}
	wantSysfs(t, filepath.Join(sysPCI, p.PCI, "infiniband", names[1], "node_guid"), sysfsGUID(devs[1].NodeGUID))
	wantNetlinkGUID(t, names[1], sysfsGUID(devs[1].NodeGUID))
}
