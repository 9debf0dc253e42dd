package sysfs_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// Functions reads every function in one walk, sorted by address: a PF
// with its SR-IOV counts and virtfn links, its VFs with their PF and
// index (VF 7 after a gap in the numbering too), an unbound VF, and a
// device of another vendor; keep filters by vendor.
func TestFunctions(t *testing.T) {
	tree := sysfstest.New(t)
	tree.AddPF(pf0, 16, sysfstest.Device{NetDev: "ibp24s0f0"})
	tree.AddVF(pf0, 0, vf0, sysfstest.Device{NetDev: "ibp24s0f0v0"})
	tree.AddVF(pf0, 7, vf7, sysfstest.Device{Driver: "-"})
	const igb = "0000:03:00.0"
	tree.AddDevice(igb, sysfstest.Device{Vendor: "0x8086", DeviceID: "0x1521", Driver: "igb", NetDev: "eno1"})
	r := sysfs.Reader{Root: tree.Root}

	fns, errs, err := r.Functions(nil)
	if err != nil || len(errs) > 0 {
		t.Fatalf("Functions: %v %v", err, errs)
	}
	want := []*sysfs.Function{
		{Addr: igb, Vendor: "0x8086", Device: "0x1521", Driver: "igb", Index: -1, TotalVFs: -1, NumVFs: -1, VFs: map[int]string{}, Netdevs: []string{"eno1"}},
		{Addr: pf0, Vendor: "0x15b3", Device: "0x1021", Driver: "mlx5_core", Index: -1, TotalVFs: 16, NumVFs: 2,
			VFs: map[int]string{0: vf0, 7: vf7}, Netdevs: []string{"ibp24s0f0"}},
		{Addr: vf0, Vendor: "0x15b3", Device: "0x101e", Driver: "mlx5_core", PF: pf0, Index: 0, TotalVFs: -1, NumVFs: -1, Netdevs: []string{"ibp24s0f0v0"}},
		{Addr: vf7, Vendor: "0x15b3", Device: "0x101e", PF: pf0, Index: 7, TotalVFs: -1, NumVFs: -1},
	}
	if diff := cmp.Diff(want, fns); diff != "" {
		t.Errorf("Functions(nil) (-want +got):\n%s", diff)
	}
	mlx, _, err := r.Functions(func(_, v string) bool { return v == "0x15b3" })
	if err != nil || len(mlx) != 3 || mlx[0].Addr != pf0 {
		t.Errorf("Functions(Mellanox) = %d functions starting %v, %v; want the PF and its 2 VFs", len(mlx), mlx, err)
	}
	if !fns[2].IsVF() || fns[1].IsVF() {
		t.Errorf("IsVF: VF %v, PF %v", fns[2].IsVF(), fns[1].IsVF())
	}
}

// A function whose attribute cannot be read (here sriov_numvfs is a FIFO,
// as a wedged device's attribute can be made to look) is returned with
// what was read and named in errs; the walk goes on to the rest. An
// unreadable root is an error.
func TestFunctionsUnreadable(t *testing.T) {
	tree := sysfstest.New(t)
	tree.AddPF(pf0, 16, sysfstest.Device{})
	tree.AddVF(pf0, 0, vf0, sysfstest.Device{})
	safefiletest.FIFOAt(t, filepath.Join(tree.DevicePath(pf0), "sriov_numvfs"), true)
	r := sysfs.Reader{Root: tree.Root}
	fns, errs, err := r.Functions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != 2 || fns[0].TotalVFs != 16 || fns[0].NumVFs != -1 || fns[1].Index != 0 {
		t.Errorf("functions = %+v, want the PF (totalvfs 16, numvfs unread) and VF 0", fns)
	}
	if len(errs) != 1 || errs[0].Addr != pf0 || !errors.Is(errs[0], safefile.ErrNotRegular) {
		t.Errorf("errs = %v, want one for %s refusing a file that is not regular", errs, pf0)
	}
	if _, _, err := (sysfs.Reader{Root: t.TempDir()}).Functions(nil); err == nil {
		t.Error("Functions over a root without bus/pci/devices: no error")
	}
}

// Netdevs lists a function's net/ entries sorted, and at most eight of
// them: a tree that gives a function more is not the kernel's, and a
// watcher keeps two files open per name.
func TestNetdevsBounded(t *testing.T) {
	tree := sysfstest.New(t)
	tree.AddPF(pf0, 16, sysfstest.Device{})
	r := sysfs.Reader{Root: tree.Root}
	if got := r.Netdevs(pf0); got != nil {
		t.Errorf("Netdevs of a function without net/ = %q, want none", got)
	}
	for _, name := range []string{"ib1", "ib0"} {
		tree.SetNetDev(pf0, name)
	}
	if got, want := r.Netdevs(pf0), []string{"ib0", "ib1"}; !cmp.Equal(got, want) {
		t.Errorf("Netdevs = %q, want %q", got, want)
	}
	for i := range 98 {
		tree.SetNetDev(pf0, fmt.Sprintf("junk%02d", i))
	}
	if got := r.Netdevs(pf0); len(got) != 8 || !slices.IsSorted(got) {
		t.Errorf("Netdevs of a function with 100 = %d names %q, want 8 sorted", len(got), got)
	}
}
