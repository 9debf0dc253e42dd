package hostconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The hardware edge the script tests fake: a fixture sysfs tree (built with
// sysfstest, laid out like the kernel's) that reacts to writes as the
// kernel does — sriov_numvfs creates and removes VFs, sriov_drivers_autoprobe
// decides whether they bind, drivers_probe/bind/unbind attach and detach
// drivers — and a fake iproute2 ip (this test binary, re-executed) that
// renames, adds altnames and hands VF GUIDs to the "PF driver", which, like
// mlx5, applies them only when the VF next binds.

const (
	envFakeIPRoot  = "HOSTCONFIG_FAKE_IP_SYSFS"
	envFakeIPState = "HOSTCONFIG_FAKE_IP_STATE"
)

func TestMain(m *testing.M) {
	if root := os.Getenv(envFakeIPRoot); root != "" {
		os.Exit(fakeIP(root, os.Getenv(envFakeIPState), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

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
	state string // shared with the fake ip: guid/, alt/, ip.log

	mu       sync.Mutex
	pfs      []*kpf
	nextRDMA int
	nextNet  int
	events   []string // "probe <vf>", "unbind <vf>"
	failures []string

	stop chan struct{}
	wg   sync.WaitGroup
}

func newKernel(t testing.TB) *kernel {
	t.Helper()
	k := &kernel{t: t, tree: sysfstest.New(panicTB{t}), state: t.TempDir(), nextRDMA: 100}
	for _, d := range []string{"guid", "alt"} {
		if err := os.MkdirAll(filepath.Join(k.state, d), 0o755); err != nil {
			t.Fatal(err)
		}
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

// start runs the kernel's reactions until the test ends.
func (k *kernel) start() {
	k.t.Helper()
	k.stop = make(chan struct{})
	fifos := map[string]func(string){
		filepath.Join(k.root(), "bus", "pci", "drivers_probe"): k.probe,
	}
	for _, drv := range []string{"mlx5_core", "igbvf"} {
		dir := filepath.Join(k.root(), "bus", "pci", "drivers", drv)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			k.t.Fatal(err)
		}
		fifos[filepath.Join(dir, "bind")] = k.probe
		fifos[filepath.Join(dir, "unbind")] = k.unbind
	}
	var files []*os.File
	for path, fn := range fifos {
		if err := syscall.Mkfifo(path, 0o200); err != nil {
			k.t.Fatal(err)
		}
		// O_RDWR: opening never blocks and the FIFO never reports EOF, so
		// every "echo X > file" of the script arrives as one line.
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			k.t.Fatal(err)
		}
		files = append(files, f)
		k.wg.Add(1)
		go k.readLines(f, fn)
	}
	k.wg.Add(1)
	go k.watchNumVFs()
	k.t.Cleanup(func() {
		close(k.stop)
		for _, f := range files {
			f.Close()
		}
		k.wg.Wait()
		for _, f := range k.failures {
			k.t.Errorf("fake kernel: %s", f)
		}
	})
}

func (k *kernel) readLines(f *os.File, fn func(string)) {
	defer k.wg.Done()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			k.locked(func() { fn(line) })
		}
	}
}

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
	// virtfnN last: the script waits for it.
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

// probe handles drivers_probe and drivers/<drv>/bind.
func (k *kernel) probe(vf string) {
	k.events = append(k.events, "probe "+vf)
	pf := k.pfOf(vf)
	if pf == nil {
		panic("probe of unknown device " + vf)
	}
	autoprobe, _ := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath(pf.pci), "sriov_drivers_autoprobe"))
	if autoprobe == "0" {
		// pci_device_can_probe: a VF of a PF with autoprobe off does not bind.
		return
	}
	if _, err := os.Lstat(filepath.Join(k.tree.DevicePath(vf), "driver")); err == nil {
		return
	}
	k.bindVF(vf)
}

// bindVF attaches the VF driver: mlx5 brings up the RDMA device with the
// GUIDs the PF holds for the VF (zero if none were set) and, with ib_ipoib
// loaded, an IPoIB netdev; igbvf brings up an Ethernet netdev.
func (k *kernel) bindVF(vf string) {
	pf := k.pfOf(vf)
	dir := k.tree.DevicePath(vf)
	mustSymlink(filepath.Join("..", "..", "..", "bus", "pci", "drivers", pf.vfDriver), filepath.Join(dir, "driver"))
	prefix := "eth"
	if pf.ib {
		node, port := "0000:0000:0000:0000", "0000:0000:0000:0000"
		if b, err := os.ReadFile(filepath.Join(k.state, "guid", vf)); err == nil {
			f := strings.Fields(string(b))
			node, port = sysfsGUID(f[0]), sysfsGUID(f[1])
		}
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

func (k *kernel) unbind(vf string) {
	k.events = append(k.events, "unbind "+vf)
	k.unbindVF(vf)
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

// Events returns what the drivers saw since the last call.
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

// ipLog returns the fake ip invocations that changed something.
func (k *kernel) ipChanges() []string {
	b, _ := os.ReadFile(filepath.Join(k.state, "ip.log"))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, "-o link show") {
			out = append(out, l)
		}
	}
	return out
}

func sysfsGUID(colon string) string {
	g, err := sysfs.ParseGUID(colon)
	if err != nil {
		panic(err.Error())
	}
	return g.String()
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

// fakeIP is iproute2's ip for the subcommands the script uses, acting on the
// fixture: it prints what ip prints and fails where ip fails.
func fakeIP(root, state string, args []string, stdout, stderr io.Writer) int {
	logf, err := os.OpenFile(filepath.Join(state, "ip.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(logf, strings.Join(args, " "))
		logf.Close()
	}
	a := strings.Join(args, " ")
	switch {
	case a == "-o link show":
		return fakeIPShowAll(root, state, stdout)
	case len(args) == 5 && args[0] == "link" && args[1] == "set" && args[2] == "dev" && (args[4] == "up" || args[4] == "down"):
		if _, err := pciOfNetdev(root, args[3]); err != nil {
			fmt.Fprintf(stderr, "Cannot find device %q\n", args[3])
			return 1
		}
		return 0
	case len(args) == 6 && args[0] == "link" && args[1] == "set" && args[2] == "dev" && args[4] == "name":
		return fakeIPRename(root, state, args[3], args[5], stderr)
	case len(args) == 7 && a == "link property add dev "+args[4]+" altname "+args[6]:
		return fakeIPAltName(root, state, args[4], args[6], stderr)
	case len(args) == 10 && args[0] == "link" && args[1] == "set" && args[2] == "dev" && args[4] == "vf" &&
		args[6] == "node_guid" && args[8] == "port_guid":
		return fakeIPVFGUID(root, state, args[3], args[5], args[7], args[9], stderr)
	}
	fmt.Fprintf(stderr, "fake ip: unsupported: ip %s\n", a)
	return 2
}

// fakeIPShowAll prints every netdev of the fixture as "ip -o link show"
// does: one line each, altnames after the link line.
func fakeIPShowAll(root, state string, stdout io.Writer) int {
	alts := map[string][]string{} // PCI → altnames
	for _, alt := range listDir(filepath.Join(state, "alt")) {
		if b, err := os.ReadFile(filepath.Join(state, "alt", alt)); err == nil {
			alts[string(b)] = append(alts[string(b)], alt)
		}
	}
	for i, name := range listDir(filepath.Join(root, "class", "net")) {
		pci, err := pciOfNetdev(root, name)
		if err != nil {
			continue
		}
		fmt.Fprintf(stdout, "%d: %s: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 02:00:00:00:00:%02x brd ff:ff:ff:ff:ff:ff", i+2, name, i)
		for _, alt := range alts[pci] {
			fmt.Fprintf(stdout, "\\    altname %s", alt)
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

func nameTaken(root, state, name string) bool {
	if _, err := os.Lstat(filepath.Join(root, "class", "net", name)); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join(state, "alt", name))
	return err == nil
}

func fakeIPRename(root, state, from, to string, stderr io.Writer) int {
	pci, err := pciOfNetdev(root, from)
	if err != nil {
		fmt.Fprintf(stderr, "Cannot find device %q\n", from)
		return 1
	}
	if nameTaken(root, state, to) {
		fmt.Fprintln(stderr, "RTNETLINK answers: File exists")
		return 2
	}
	dev := filepath.Join(root, "bus", "pci", "devices", pci, "net")
	if err := os.Rename(filepath.Join(dev, from), filepath.Join(dev, to)); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	os.Remove(filepath.Join(root, "class", "net", from))
	real, _ := filepath.EvalSymlinks(filepath.Join(dev, to))
	rel, _ := filepath.Rel(filepath.Join(root, "class", "net"), real)
	if err := os.Symlink(rel, filepath.Join(root, "class", "net", to)); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	return 0
}

func fakeIPAltName(root, state, dev, alt string, stderr io.Writer) int {
	pci, err := pciOfNetdev(root, dev)
	if err != nil {
		fmt.Fprintf(stderr, "Cannot find device %q\n", dev)
		return 1
	}
	if nameTaken(root, state, alt) {
		fmt.Fprintln(stderr, "RTNETLINK answers: File exists")
		return 2
	}
	if err := os.WriteFile(filepath.Join(state, "alt", alt), []byte(pci), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	return 0
}

// fakeIPVFGUID hands a VF's GUIDs to the PF driver. The format check is
// iproute2's get_guid: exactly xx:xx:xx:xx:xx:xx:xx:xx.
func fakeIPVFGUID(root, state, pfdev, vfIndex, node, port string, stderr io.Writer) int {
	for _, g := range []string{node, port} {
		if err := strictGUID(g); err != nil {
			fmt.Fprintf(stderr, "Error: argument %q is wrong: invalid GUID format\n", g)
			return 1
		}
	}
	pci, err := pciOfNetdev(root, pfdev)
	if err != nil {
		fmt.Fprintf(stderr, "Cannot find device %q\n", pfdev)
		return 1
	}
	target, err := os.Readlink(filepath.Join(root, "bus", "pci", "devices", pci, "virtfn"+vfIndex))
	if err != nil {
		fmt.Fprintln(stderr, "RTNETLINK answers: Invalid argument")
		return 2
	}
	vf := filepath.Base(target)
	if err := os.WriteFile(filepath.Join(state, "guid", vf), []byte(node+" "+port), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	return 0
}

func strictGUID(s string) error {
	if len(s) != 23 {
		return errors.New("length")
	}
	for i := 0; i < 23; i++ {
		c := s[i]
		if i%3 == 2 {
			if c != ':' {
				return errors.New("colon")
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return errors.New("hex")
		}
	}
	return nil
}
