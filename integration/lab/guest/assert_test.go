//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
)

// altNameOf is the plugin's default altname for a VF: vf-{pci}, ':' → '-'.
func altNameOf(v vf) string { return "vf-" + strings.ReplaceAll(v.PCI, ":", "-") }

// mustAdd runs ADD and checks the result and the pod: the interface entry
// carries the VF's PCI address and MAC, and the pod holds that very VF as
// ifname with its altname.
func mustAdd(t testing.TB, a *attachment) types.Result {
	t.Helper()
	r, err := a.add()
	if err != nil {
		t.Fatalf("ADD %s: %v", a, err)
	}
	if err := verifyResult(a, r); err != nil {
		t.Fatalf("ADD %s: %v", a, err)
	}
	if err := verifyInPod(a); err != nil {
		t.Fatalf("after ADD %s: %v", a, err)
	}
	return r
}

// verifyResult checks the result's entry for the attachment.
func verifyResult(a *attachment, r types.Result) error {
	i, err := resultInterface(r, a.pod.Path())
	if err != nil {
		return err
	}
	var bad []string
	if !strings.EqualFold(i.Mac, a.vf.MAC) {
		bad = append(bad, fmt.Sprintf("mac %q, want %q", i.Mac, a.vf.MAC))
	}
	if i.PciID != a.vf.PCI {
		bad = append(bad, fmt.Sprintf("pciID %q, want %q", i.PciID, a.vf.PCI))
	}
	if len(bad) > 0 {
		return fmt.Errorf("result interface %s: %s", i.Name, strings.Join(bad, "; "))
	}
	return nil
}

// verifyInPod checks that the pod holds the VF, found by PCI parent, named
// ifname, with its MAC and altname.
func verifyInPod(a *attachment) error {
	l, err := linkByParent(a.pod.Path(), a.vf.PCI)
	if err != nil {
		return err
	}
	var bad []string
	at := l.Attrs()
	if at.Name != ifName {
		bad = append(bad, fmt.Sprintf("named %q, want %q", at.Name, ifName))
	}
	if !strings.EqualFold(at.HardwareAddr.String(), a.vf.MAC) {
		bad = append(bad, fmt.Sprintf("mac %s, want %s", at.HardwareAddr, a.vf.MAC))
	}
	if !hasAltName(l, altNameOf(a.vf)) {
		bad = append(bad, fmt.Sprintf("altnames %v lack %s", at.AltNames, altNameOf(a.vf)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s", a, strings.Join(bad, "; "))
	}
	return nil
}

func mustCheck(t testing.TB, a *attachment) {
	t.Helper()
	if err := a.check(); err != nil {
		t.Fatalf("CHECK %s: %v", a, err)
	}
}

// mustDel runs DEL and checks that the VF is back in the root netns.
func mustDel(t testing.TB, a *attachment) {
	t.Helper()
	if err := a.del(); err != nil {
		t.Fatalf("DEL %s: %v", a, err)
	}
	if _, err := rootLinkOf(a.vf.PCI); err != nil {
		t.Fatalf("after DEL %s the host does not see it: %v", a, err)
	}
}

// wantCode checks that err is a CNI error with the given code and that its
// message mentions every given word.
func wantCode(t testing.TB, what string, err error, code uint, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want error %d", what, code)
	}
	if got := cniCode(err); got != code {
		t.Fatalf("%s: code %d, want %d: %v", what, got, code, err)
	}
	for _, w := range words {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
			t.Fatalf("%s: error %d does not mention %q: %v", what, code, w, err)
		}
	}
	t.Logf("%s: error %d as expected: %v", what, code, err)
}

// records lists the attachment records (JSON files) under a state dir.
func records(stateDir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".json") {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

// addCheckDel ADDs every attachment in turn, checks one record each, CHECKs
// each, DELs each and checks no record is left.
func addCheckDel(t *testing.T, e *env, as []*attachment) {
	t.Helper()
	for _, a := range as {
		mustAdd(t, a)
	}
	wantRecords(t, e, len(as))
	for _, a := range as {
		mustCheck(t, a)
	}
	for _, a := range as {
		mustDel(t, a)
	}
	wantRecords(t, e, 0)
}

func wantRecords(t testing.TB, e *env, n int) {
	t.Helper()
	recs, err := records(e.stateDir)
	if err != nil {
		t.Fatalf("list records: %v", err)
	}
	if len(recs) != n {
		t.Fatalf("%d attachment records in %s, want %d: %v", len(recs), e.stateDir, n, recs)
	}
}

// waitCarrier waits until the VF's link in a netns has (or lacks) carrier.
func waitCarrier(path string, v vf, want bool, timeout time.Duration) error {
	return poll(timeout, func() error {
		l, err := linkByParent(path, v.PCI)
		if err != nil {
			return err
		}
		if hasCarrier(l) != want {
			return fmt.Errorf("%s carrier %v, want %v", v, hasCarrier(l), want)
		}
		return nil
	})
}

// restoreLab is every scenario's last cleanup: PFs up, every VF back in the
// root netns (a VF missing there is a leak and fails the scenario), kernel
// names and altnames as they were at setup, every VF warmed up again, and
// the lab's fake InfiniBand provider unloaded.
func restoreLab(t testing.TB) {
	if moduleLoaded("sst_ib") {
		t.Errorf("hygiene: sst_ib is still loaded; a scenario that loads it must unload it")
	}
	for _, p := range theLab.PFs {
		if err := setLinkUp(rootNetns, p.Link, true); err != nil {
			t.Errorf("hygiene: PF %s up: %v", p.Link, err)
		}
	}
	var links []netlink.Link
	for _, v := range theLab.allVFs() {
		var l netlink.Link
		err := poll(15*time.Second, func() (err error) { l, err = rootLinkOf(v.PCI); return err })
		if err != nil {
			t.Errorf("hygiene: %s leaked, not back in the root netns: %v", v, err)
			return
		}
		links = append(links, l)
	}
	if err := restoreNames(t, links); err != nil {
		t.Errorf("hygiene: %v", err)
	}
	if _, err := warmUp(theLab.allVFs()); err != nil {
		t.Errorf("hygiene: VFs do not come up: %v", err)
	}
}

// restoreNames gives every VF its setup name back (through temporary names,
// since scenarios may have swapped them) and drops altnames left on it.
func restoreNames(t testing.TB, links []netlink.Link) error {
	vfs := theLab.allVFs()
	for i, l := range links {
		if alt := l.Attrs().AltNames; len(alt) > 0 {
			t.Logf("hygiene: %s kept altnames %v in the root netns; removing", vfs[i], alt)
			if err := delAltNames(rootNetns, l, alt); err != nil {
				return err
			}
		}
		if l.Attrs().Name != vfs[i].Name {
			if err := renameLink(rootNetns, l, fmt.Sprintf("labtmp%d", i)); err != nil {
				return err
			}
		}
	}
	for _, v := range vfs {
		l, err := rootLinkOf(v.PCI)
		if err != nil {
			return err
		}
		if l.Attrs().Name != v.Name {
			if err := renameLink(rootNetns, l, v.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
