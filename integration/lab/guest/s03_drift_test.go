//go:build labguest

package guest

import (
	"testing"
)

// TestLab03RenameAfterAddDrift: the VF is renamed in the pod after ADD.
// CHECK reports the drift; DEL renames it back so host-device can return
// it; the host sees it again under its kernel name; a second ADD works.
func TestLab03RenameAfterAddDrift(t *testing.T) {
	e := newEnv(t)
	v := theLab.PFs[0].VFs[2]
	p := newPod(t, "drift")
	a := e.attach(p, v, opts{})
	mustAdd(t, a)
	mustCheck(t, a)

	l, err := linkByParent(p.Path(), v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	const rogue = "rogue0"
	if err := renameLink(p.Path(), l, rogue); err != nil {
		t.Fatal(err)
	}
	// In the chain, host-device's CHECK runs first and looks the interface
	// up by name, so it may be the one to fail; either way CHECK must fail.
	if err := a.check(); err == nil {
		t.Fatalf("CHECK of the chain passed with %s renamed to %s", v, rogue)
	} else {
		t.Logf("chain CHECK failed as expected: %v", err)
	}
	wantCode(t, "CHECK of sriov-stable-cni", a.checkOurs(), 105, v.PCI, rogue)

	mustDel(t, a)
	host, err := rootLinkOf(v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if host.Attrs().Name != v.Name {
		t.Fatalf("after DEL the host sees %s as %q, want its kernel name %q", v.PCI, host.Attrs().Name, v.Name)
	}
	wantRecords(t, e, 0)

	again := e.attach(newPod(t, "drift-again"), v, opts{})
	mustAdd(t, again)
	mustCheck(t, again)
	mustDel(t, again)
	wantRecords(t, e, 0)
}
