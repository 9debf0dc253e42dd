package hostconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The hardware edge Apply's tests fake: a fixture sysfs tree (built with
// sysfstest, laid out like the kernel's) that reacts to sriov_numvfs as the
// kernel does: writing N creates the VFs (bound at once when the PF's
// sriov_drivers_autoprobe is on; mlx5 brings up each VF's RDMA device with
// the GUIDs the PF holds for it, zero when none were set), writing 0 removes
// them, and any other change is refused.

// panicTB lets sysfstest run in the fake kernel's goroutines: a fixture
// failure panics there and is recorded instead of calling FailNow off the
// test goroutine.
type panicTB struct{ t testing.TB }

func (p panicTB) Helper()         {}
func (p panicTB) TempDir() string { return p.t.TempDir() }
func (p panicTB) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// kpf is a PF as the fake kernel knows it.
type kpf struct {
	pci      string
	ib       bool   // InfiniBand port (else Ethernet, no RDMA device: igb)
	vfDriver string // mlx5_core, igbvf
	offset   int
	stride   int
	vfs      []string
}

type kernel struct {
	t     testing.TB
	tree  *sysfstest.Tree
	state string // alt/<altname>: the PCI function holding it (Checker.AltNames)

	mu       sync.Mutex
	pfs      []*kpf
	nextRDMA int
	nextNet  int
	events   []string // sriov_numvfs changes, in order
	failures []string

	stop chan struct{}
	wg   sync.WaitGroup
}

func newKernel(t testing.TB) *kernel {
	t.Helper()
	k := &kernel{t: t, tree: sysfstest.New(panicTB{t}), state: t.TempDir(), nextRDMA: 100}
	if err := os.MkdirAll(filepath.Join(k.state, "alt"), 0o755); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *kernel) root() string { return k.tree.Root }

// addPF adds a PF at boot: SR-IOV capable, no VFs yet, driver bound.
func (k *kernel) addPF(pf *kpf, total int, d sysfstest.Device) {
	k.t.Helper()
	k.tree.AddPF(pf.pci, total, d)
	dir := k.tree.DevicePath(pf.pci)
	k.tree.WriteFile(filepath.Join(dir, "sriov_offset"), strconv.Itoa(pf.offset))
	k.tree.WriteFile(filepath.Join(dir, "sriov_stride"), strconv.Itoa(pf.stride))
	k.tree.WriteFile(filepath.Join(dir, "sriov_drivers_autoprobe"), "1")
	k.pfs = append(k.pfs, pf)
}

func (k *kernel) pf(pci string) *kpf {
	for _, p := range k.pfs {
		if p.pci == pci {
			return p
		}
	}
	return nil
}

// start runs the kernel's reactions to sriov_numvfs until the test ends.
func (k *kernel) start() {
	k.t.Helper()
	k.stop = make(chan struct{})
	k.wg.Add(1)
	go k.watchNumVFs()
	k.t.Cleanup(func() {
		close(k.stop)
		k.wg.Wait()
		for _, f := range k.failures {
			k.t.Errorf("fake kernel: %s", f)
		}
	})
}

// locked runs fn under the kernel's lock, recording a fixture panic as a
// failure.
func (k *kernel) locked(fn func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			k.failures = append(k.failures, fmt.Sprint(r))
		}
	}()
	fn()
}

// watchNumVFs polls each PF's sriov_numvfs (a regular file here) and makes
// the VFs match what was written.
func (k *kernel) watchNumVFs() {
	defer k.wg.Done()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-tick.C:
		}
		k.locked(func() {
			for _, pf := range k.pfs {
				s, err := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath(pf.pci), "sriov_numvfs"))
				if err != nil {
					continue
				}
				want, err := strconv.Atoi(s)
				if err != nil || want == len(pf.vfs) {
					continue
				}
				k.setNumVFs(pf, want)
			}
		})
	}
}

// setNumVFs mirrors sriov_numvfs: from 0 to N creates VFs (probing them
// when autoprobe is on), to 0 removes them; other changes are refused by
// the kernel (EBUSY), so the fake only sees those two.
func (k *kernel) setNumVFs(pf *kpf, n int) {
	k.events = append(k.events, fmt.Sprintf("%s sriov_numvfs %d", pf.pci, n))
	if n == 0 {
		for _, vf := range pf.vfs {
			k.unbindVF(vf)
			k.removeVF(pf, vf)
		}
		pf.vfs = nil
		return
	}
	if len(pf.vfs) != 0 {
		panic(fmt.Sprintf("PF %s: sriov_numvfs %d -> %d without going through 0 (the kernel says EBUSY)", pf.pci, len(pf.vfs), n))
	}
	vfs, err := computeVFs(pf.pci, pf.offset, pf.stride, n)
	if err != nil {
		panic(err.Error())
	}
	autoprobe, _ := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath(pf.pci), "sriov_drivers_autoprobe"))
	for i, vf := range vfs {
		k.createVF(pf, i, vf)
		if autoprobe != "0" {
			k.bindVF(vf)
		}
	}
	pf.vfs = vfs
}

func (k *kernel) createVF(pf *kpf, i int, vf string) {
	id := "0x101e"
	if !pf.ib {
		id = "0x10ca"
	}
	vendor := "0x15b3"
	if !pf.ib {
		vendor = "0x8086"
	}
	k.tree.AddDevice(vf, sysfstest.Device{Vendor: vendor, DeviceID: id, Driver: "-"})
	mustSymlink(filepath.Join("..", pf.pci), filepath.Join(k.tree.DevicePath(vf), "physfn"))
	// virtfnN last: Apply waits for it.
	mustSymlink(filepath.Join("..", vf), filepath.Join(k.tree.DevicePath(pf.pci), "virtfn"+strconv.Itoa(i)))
}

func (k *kernel) removeVF(pf *kpf, vf string) {
	for i, v := range pf.vfs {
		if v == vf {
			mustRemove(filepath.Join(k.tree.DevicePath(pf.pci), "virtfn"+strconv.Itoa(i)))
		}
	}
	mustRemove(filepath.Join(k.root(), "bus", "pci", "devices", vf))
	mustRemove(k.tree.DevicePath(vf))
}

func (k *kernel) pfOf(vf string) *kpf {
	for _, pf := range k.pfs {
		for _, v := range pf.vfs {
			if v == vf {
				return pf
			}
		}
	}
	// Still being created (the lock is held by setNumVFs).
	target, err := os.Readlink(filepath.Join(k.tree.DevicePath(vf), "physfn"))
	if err == nil {
		return k.pf(filepath.Base(target))
	}
	return nil
}

// bindVF attaches the VF driver: mlx5 brings up the RDMA device (with zero
// GUIDs: the fake's PF holds none for its VFs) and, with ib_ipoib loaded, an
// IPoIB netdev; igbvf brings up an Ethernet netdev.
func (k *kernel) bindVF(vf string) {
	pf := k.pfOf(vf)
	dir := k.tree.DevicePath(vf)
	mustSymlink(filepath.Join("..", "..", "..", "bus", "pci", "drivers", pf.vfDriver), filepath.Join(dir, "driver"))
	prefix := "eth"
	if pf.ib {
		node, port := "0000:0000:0000:0000", "0000:0000:0000:0000"
		k.tree.SetRDMA(vf, sysfstest.RDMA{Name: fmt.Sprintf("mlx5_%d", k.nextRDMA), NodeGUID: node,
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(port)}}})
		k.nextRDMA++
		prefix = "ib"
		if _, err := os.Stat(filepath.Join(k.root(), "module", "ib_ipoib")); err != nil {
			return
		}
	}
	k.tree.SetNetDev(vf, fmt.Sprintf("%s%d", prefix, k.nextNet))
	k.nextNet++
}

// unbindVF detaches the driver: the RDMA device, the netdev and its
// altnames go away.
func (k *kernel) unbindVF(vf string) {
	dir := k.tree.DevicePath(vf)
	if _, err := os.Lstat(filepath.Join(dir, "driver")); err != nil {
		return
	}
	for _, name := range listDir(filepath.Join(dir, "net")) {
		mustRemove(filepath.Join(k.root(), "class", "net", name))
	}
	for _, name := range listDir(filepath.Join(dir, "infiniband")) {
		mustRemove(filepath.Join(k.root(), "class", "infiniband", name))
	}
	for _, alt := range listDir(filepath.Join(k.state, "alt")) {
		if b, _ := os.ReadFile(filepath.Join(k.state, "alt", alt)); string(b) == vf {
			mustRemove(filepath.Join(k.state, "alt", alt))
		}
	}
	mustRemove(filepath.Join(dir, "net"))
	mustRemove(filepath.Join(dir, "infiniband"))
	mustRemove(filepath.Join(dir, "driver"))
}

// takeEvents returns the sriov_numvfs changes the kernel made since the
// last call ("0000:18:00.0 sriov_numvfs 8").
func (k *kernel) takeEvents() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ev := k.events
	k.events = nil
	return ev
}

// setVFGUIDs sets a bound VF's GUIDs as a previous run or another tool left
// them.
func (k *kernel) setVFGUIDs(vf string, g VFGUIDs) {
	k.locked(func() { k.setVFGUIDsLocked(vf, g) })
}

// altNamesOf lists the altnames the fake ip holds for a netdev: the
// Checker.AltNames of these tests.
func (k *kernel) altNamesOf(ifname string) ([]string, error) {
	pci, err := pciOfNetdev(k.root(), ifname)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, alt := range listDir(filepath.Join(k.state, "alt")) {
		if b, _ := os.ReadFile(filepath.Join(k.state, "alt", alt)); string(b) == pci {
			out = append(out, alt)
		}
	}
	return out, nil
}

func mustSymlink(target, link string) {
	if err := os.Symlink(target, link); err != nil {
		panic(err.Error())
	}
}

func mustRemove(path string) {
	if err := os.RemoveAll(path); err != nil {
		panic(err.Error())
	}
}

func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// pciOfNetdev follows class/net/<name> to the PCI function holding it.
func pciOfNetdev(root, name string) (string, error) {
	target, err := os.Readlink(filepath.Join(root, "class", "net", name))
	if err != nil {
		return "", err
	}
	return filepath.Base(filepath.Dir(filepath.Dir(target))), nil
}
