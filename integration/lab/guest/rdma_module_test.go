//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"golang.org/x/sys/unix"
)

// The RDMA modules the lab stages (run.sh) and the scenarios load: the real
// ib_core of the guest kernel, and sst_ib, the lab's fake InfiniBand
// provider (integration/lab/ibtest), which registers one ib_device under
// each PCI function it is given, as mlx5_ib does under a VF.
const (
	sstIBParams = "/sys/module/sst_ib/parameters"
	// ibPortActive and ibPortDown are the logical port states of
	// ports/1/state (and of sst_ib's port_states parameter).
	ibPortActive = 4
	ibPortDown   = 1
)

// rdmaModules are the modules that use ib_core, users first: everything
// loadIBCore must unload before it can reload ib_core.
var rdmaModules = []string{"sst_ib", "rdma_rxe", "ib_uverbs", "ib_core"}

// testIBDev is one InfiniBand device for sst_ib to register.
type testIBDev struct {
	PCI        string // parent PCI function, e.g. 0000:01:10.0
	NodeGUID   uint64 // 0 = unassigned, as a VF's GUID before it is set
	PortActive bool   // port 1 ACTIVE, else DOWN
}

// moduleLoaded tells whether a loadable module is in the kernel.
func moduleLoaded(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/module", name, "initstate"))
	return err == nil
}

// modprobe loads a module with its dependencies and parameters.
// Equivalent to: modprobe $name $params...
func modprobe(name string, params ...string) error {
	out, err := exec.Command("modprobe", append([]string{name}, params...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("modprobe %s %s: %w: %s", name, strings.Join(params, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// rmmod unloads a module if it is loaded, waiting a little while it is
// still in use (a netns being cleaned up, a closing socket).
// Equivalent to: rmmod $name
func rmmod(name string) error {
	if !moduleLoaded(name) {
		return nil
	}
	return poll(10*time.Second, func() error {
		err := unix.DeleteModule(name, unix.O_NONBLOCK)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("rmmod %s: %w", name, err)
	})
}

// unloadRDMA unloads every RDMA module the lab uses, users first.
func unloadRDMA() error {
	for _, m := range rdmaModules {
		if err := rmmod(m); err != nil {
			return err
		}
	}
	return nil
}

// withRDMAHandle runs f with a NETLINK_RDMA handle of the test's own netns,
// closed afterwards: an open RDMA netlink socket pins ib_core in the kernel.
func withRDMAHandle(f func(h netlinksafe.Handle) error) error {
	h, err := netlinksafe.NewHandle(unix.NETLINK_RDMA)
	if err != nil {
		return fmt.Errorf("RDMA netlink handle: %w", err)
	}
	defer h.Close()
	return f(h)
}

// rdmaNetnsMode asks ib_core for its netns mode, "shared" or "exclusive".
// Equivalent to: rdma system show netns
func rdmaNetnsMode() (string, error) {
	var mode string
	err := withRDMAHandle(func(h netlinksafe.Handle) (err error) {
		mode, err = h.RdmaSystemGetNetnsMode()
		return err
	})
	return mode, err
}

// ensureIBCore loads ib_core in the wanted netns mode, first unloading it
// (and its users) when it is loaded in the other mode. The mode can be
// switched at run time only while no netns but init_net exists; loading the
// module with netns_mode= has no such limit.
func ensureIBCore(exclusive bool) error {
	want := "shared"
	if exclusive {
		want = "exclusive"
	}
	if moduleLoaded("ib_core") {
		mode, err := rdmaNetnsMode()
		if err != nil {
			return err
		}
		if mode == want {
			return nil
		}
		if err := unloadRDMA(); err != nil {
			return err
		}
	}
	params := []string{}
	if exclusive {
		params = append(params, "netns_mode=0")
	}
	if err := modprobe("ib_core", params...); err != nil {
		return err
	}
	mode, err := rdmaNetnsMode()
	if err != nil {
		return err
	}
	if mode != want {
		return fmt.Errorf("ib_core loaded with %v is in %s netns mode, want %s", params, mode, want)
	}
	return nil
}

// loadIBCore makes sure ib_core is loaded in exclusive or shared netns
// mode. Its cleanup puts things back as they were: ib_core unloaded (with
// every RDMA module) when it was not loaded before, else loaded in its
// earlier mode.
func loadIBCore(t testing.TB, exclusive bool) {
	t.Helper()
	wasLoaded, wasExclusive := moduleLoaded("ib_core"), false
	if wasLoaded {
		mode, err := rdmaNetnsMode()
		if err != nil {
			t.Fatal(err)
		}
		wasExclusive = mode == "exclusive"
	}
	t.Cleanup(func() {
		var err error
		if wasLoaded {
			err = ensureIBCore(wasExclusive)
		} else {
			err = unloadRDMA()
		}
		if err != nil {
			t.Errorf("restore ib_core: %v", err)
		}
	})
	if err := ensureIBCore(exclusive); err != nil {
		t.Fatal(err)
	}
}

// loadTestIB loads sst_ib with one InfiniBand device per entry, each under
// its PCI function, waits until every one shows in sysfs and returns their
// names in the same order. ib_core must be loaded (loadIBCore) first. The
// cleanup unloads sst_ib.
// Equivalent to: modprobe sst_ib pcis=$pci,... node_guids=$guid,... port_states=4,...
func loadTestIB(t testing.TB, devs []testIBDev) []string {
	t.Helper()
	if !moduleLoaded("ib_core") {
		t.Fatal("load ib_core (loadIBCore) before sst_ib, or modprobe loads it in the default mode")
	}
	if moduleLoaded("sst_ib") {
		t.Fatal("sst_ib is already loaded")
	}
	var pcis, guids, states []string
	for _, d := range devs {
		pcis = append(pcis, d.PCI)
		guids = append(guids, fmt.Sprintf("0x%016x", d.NodeGUID))
		states = append(states, strconv.Itoa(portState(d.PortActive)))
	}
	t.Cleanup(func() {
		if err := rmmod("sst_ib"); err != nil {
			t.Errorf("unload sst_ib: %v", err)
		}
	})
	err := modprobe("sst_ib", "pcis="+strings.Join(pcis, ","), "node_guids="+strings.Join(guids, ","),
		"port_states="+strings.Join(states, ","))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		err := poll(10*time.Second, func() (err error) {
			names[i], err = ibDevOf(d.PCI)
			return err
		})
		if err != nil {
			t.Fatalf("sst_ib loaded, but: %v", err)
		}
	}
	return names
}

// ibDevOf returns the one InfiniBand device the host's sysfs shows under a
// PCI function: /sys/bus/pci/devices/<pci>/infiniband/<name>.
func ibDevOf(pci string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(sysPCI, pci, "infiniband"))
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("%s/%s/infiniband holds %d devices, want 1", sysPCI, pci, len(entries))
	}
	return entries[0].Name(), nil
}

func portState(active bool) int {
	if active {
		return ibPortActive
	}
	return ibPortDown
}

// setPortActive sets the port state of sst_ib's device i, rewriting the
// whole port_states parameter; it shows at once in ports/1/state.
// Equivalent to: echo 4,1,4 > /sys/module/sst_ib/parameters/port_states
func setPortActive(t testing.TB, i int, active bool) {
	t.Helper()
	setParamEntry(t, "port_states", i, strconv.Itoa(portState(active)))
}

// setNodeGUID sets the node GUID of sst_ib's device i, rewriting the whole
// node_guids parameter; it shows at once in node_guid and RDMA netlink.
// Equivalent to: echo 0x...,0x... > /sys/module/sst_ib/parameters/node_guids
func setNodeGUID(t testing.TB, i int, guid uint64) {
	t.Helper()
	setParamEntry(t, "node_guids", i, fmt.Sprintf("0x%016x", guid))
}

// setParamEntry replaces entry i of one of sst_ib's array parameters,
// reading the others back from the module.
func setParamEntry(t testing.TB, param string, i int, value string) {
	t.Helper()
	path := filepath.Join(sstIBParams, param)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read sst_ib's %s: %v", param, err)
	}
	entries := strings.Split(strings.TrimSpace(string(b)), ",")
	if i < 0 || i >= len(entries) {
		t.Fatalf("sst_ib's %s has %d entries (%q), no entry %d", param, len(entries), b, i)
	}
	entries[i] = value
	if err := os.WriteFile(path, []byte(strings.Join(entries, ",")), 0); err != nil {
		t.Fatalf("write sst_ib's %s: %v", param, err)
	}
}

// sysfsGUID formats a GUID as sysfs node_guid shows it: 0002:c903:00a1:b2c3.
func sysfsGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// kernelLog returns the kernel's log buffer. Equivalent to: dmesg
func kernelLog() (string, error) {
	out, err := exec.Command("dmesg").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dmesg: %w: %s", err, out)
	}
	return string(out), nil
}

// kernelTrouble lists the lines the kernel logged between two reads of its
// log that show a warning, bug or oops (all lines of after when the ring
// buffer wrapped in between).
func kernelTrouble(before, after string) []string {
	var bad []string
	if strings.HasPrefix(after, before) {
		after = after[len(before):]
	}
	for _, l := range strings.Split(after, "\n") {
		for _, w := range []string{"WARNING:", "BUG:", "Oops", "Call Trace", "refcount_t:", "kernfs: "} {
			if strings.Contains(l, w) {
				bad = append(bad, l)
				break
			}
		}
	}
	return bad
}

// noKernelTrouble registers a cleanup, run after the cleanups registered
// after it (modules unloaded, netns deleted), that fails the test when the
// kernel logged a warning, bug or oops meanwhile.
func noKernelTrouble(t testing.TB) {
	t.Helper()
	before, err := kernelLog()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		after, err := kernelLog()
		if err != nil {
			t.Error(err)
			return
		}
		if bad := kernelTrouble(before, after); len(bad) > 0 {
			t.Errorf("the kernel logged trouble:\n%s", strings.Join(bad, "\n"))
		}
	})
}
