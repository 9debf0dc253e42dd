//go:build labguest

package guest

import (
	"testing"
)

// TestLab06SwappedNames: two VFs' kernel names are swapped on the host
// before the chain runs (probe order changed); each pod still gets the VF
// of its deviceID, asserted by PCI address and MAC.
func TestLab06SwappedNames(t *testing.T) {
	e := newEnv(t)
	x, y := theLab.PFs[0].VFs[0], theLab.PFs[0].VFs[1]
	swapNames(t, x, y)
	ax := e.attach(newPod(t, "x"), x, opts{})
	ay := e.attach(newPod(t, "y"), y, opts{})
	mustAdd(t, ax)
	mustAdd(t, ay)
	mustCheck(t, ax)
	mustCheck(t, ay)
	mustDel(t, ax)
	mustDel(t, ay)
	wantRecords(t, e, 0)
}

// swapNames gives x the kernel name of y and y that of x, in the root netns.
func swapNames(t testing.TB, x, y vf) {
	t.Helper()
	lx, err := rootLinkOf(x.PCI)
	if err != nil {
		t.Fatal(err)
	}
	ly, err := rootLinkOf(y.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if err := renameLink(rootNetns, lx, "labswap"); err != nil {
		t.Fatal(err)
	}
	if err := renameLink(rootNetns, ly, x.Name); err != nil {
		t.Fatal(err)
	}
	if err := renameLink(rootNetns, lx, y.Name); err != nil {
		t.Fatal(err)
	}
	got, err := rootLinkOf(x.PCI)
	if err != nil || got.Attrs().Name != y.Name {
		t.Fatalf("swap failed: %s is %v (%v)", x.PCI, got, err)
	}
	t.Logf("swapped: %s is now %s, %s is now %s", x.PCI, y.Name, y.PCI, x.Name)
}
