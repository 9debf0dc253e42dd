package hostconfig

import (
	"context"
	"fmt"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// apply runs Apply on the fixture with a short wait and the netlink steps
// off (the fixture's netdevs are not links of this namespace).
func apply(t *testing.T, spec *Spec, root string, wait time.Duration) *ApplyResult {
	t.Helper()
	res, err := Apply(context.Background(), spec, ApplyOptions{SysfsRoot: root, Wait: wait, Log: testLog(t)})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

// testLog sends Apply's log to the test's output.
func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// dropIPoIB unloads ib_ipoib from the fixture: IB VFs then get no host
// netdev, so nothing needs naming through netlink.
func dropIPoIB(t *testing.T, k *kernel) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(k.root(), "module", "ib_ipoib")); err != nil {
		t.Fatal(err)
	}
}

// TestApplyCreatesVFs: at boot Apply writes each PF's VF count once; a PF
// that has another count goes through 0 first (the kernel refuses any
// other change); a second run writes nothing.
func TestApplyCreatesVFs(t *testing.T) {
	k := newDGXBoot(t)
	dropIPoIB(t, k)
	k.start()
	const spec = "linkType: infiniband\nguids: none\npfAltName: \"\"\nvfs: 8\npfs:\n  - match: {vendor: 0x15b3, device: 0x1021}\n"
	// 0000:18:00.0 was left with 4 VFs.
	k.tree.WriteFile(filepath.Join(k.tree.DevicePath("0000:18:00.0"), "sriov_numvfs"), "4")
	waitFixture(t, func() bool { return node{root: k.root()}.virtfn("0000:18:00.0", 3) != "" })
	k.takeEvents()

	res := apply(t, mustParse(t, spec), k.root(), 10*time.Second)
	if !res.OK() {
		t.Fatalf("problems %v, findings:\n%s", res.Problems, findingsText(res.Findings))
	}
	var wantEvents, wantChanges []string
	for _, pf := range dgxH200() {
		if pf.pci == "0000:18:00.0" {
			wantEvents = append(wantEvents, pf.pci+" sriov_numvfs 0")
			wantChanges = append(wantChanges, "PF "+pf.pci+": removed its 4 VFs (the spec wants 8)")
		}
		wantEvents = append(wantEvents, pf.pci+" sriov_numvfs 8")
		wantChanges = append(wantChanges, "PF "+pf.pci+": created 8 VFs")
	}
	if diff := cmp.Diff(wantEvents, k.takeEvents()); diff != "" {
		t.Errorf("sriov_numvfs writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantChanges, res.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}

	again := apply(t, mustParse(t, spec), k.root(), 10*time.Second)
	if len(again.Changes) != 0 || len(again.Problems) != 0 || len(k.takeEvents()) != 0 {
		t.Errorf("second run: changes %v, problems %v", again.Changes, again.Problems)
	}
}

// waitFixture waits for the fake kernel to do what the test set up.
func waitFixture(t *testing.T, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fake kernel did not react within 10 s")
		}
	}
}

// TestApplyBoundedWaits: a PF that never appears and VFs that never appear
// (no kernel creates them here) end each wait at the bound with a problem
// naming the PF, and Apply returns.
func TestApplyBoundedWaits(t *testing.T) {
	k := newDGXBoot(t) // not started: writing sriov_numvfs creates nothing
	spec := mustParse(t, "linkType: infiniband\nguids: none\nvfs: 8\npfs:\n"+
		"  - pci: 0000:18:00.0\n  - {pci: 0000:77:00.0, vfOffset: 2, vfStride: 1}\n")
	const wait = 300 * time.Millisecond
	start := time.Now()
	res := apply(t, spec, k.root(), wait)
	if took := time.Since(start); took > 10*wait {
		t.Errorf("Apply took %s with waits bounded at %s", took, wait)
	}
	for _, want := range []string{
		"PF 0000:77:00.0: no such PCI device under " + k.root() + "/bus/pci/devices after 300ms: is the card present (lspci -s 0000:77:00.0)",
		"PF 0000:18:00.0: VF 0 (0000:18:00.2) did not appear within 300ms of creating the VFs (see dmesg)",
	} {
		if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("no problem %q in:\n%s", want, strings.Join(res.Problems, "\n"))
		}
	}
	if res.OK() || !HasErrors(res.Findings) {
		t.Errorf("Apply reported success: %v", res.Problems)
	}
	if v, _ := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath("0000:18:00.0"), "sriov_numvfs")); v != "8" {
		t.Errorf("sriov_numvfs is %q, want the 8 Apply wrote", v)
	}
}

// TestApplyChangesNothingOnAMatchingNode: a node as the unit leaves it
// (VFs, GUIDs, names) is left alone: no change, no problem, no file of its
// sysfs written.
func TestApplyChangesNothingOnAMatchingNode(t *testing.T) {
	k, p := healthyDGX(t)
	before := snapshotTree(t, k.root())
	res := apply(t, p.Spec, k.root(), time.Second)
	if len(res.Changes) != 0 || len(res.Problems) != 0 || len(res.Findings) != 0 {
		t.Errorf("changes %v, problems %v, findings:\n%s", res.Changes, res.Problems, findingsText(res.Findings))
	}
	if diff := cmp.Diff(before, snapshotTree(t, k.root())); diff != "" {
		t.Errorf("Apply wrote to a node that matched (-before +after):\n%s", diff)
	}
}

// snapshotTree records every file's content and modification time.
func snapshotTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = fmt.Sprintf("%s %q", info.ModTime().Format(time.RFC3339Nano), b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestApplyRefusesPFGUIDs: a PF whose GUID cannot seed VF GUIDs gets its
// VFs (created with autoprobe left on, since no GUID will be set before
// they bind) and a problem saying why its VFs get none; nothing is derived
// from it.
func TestApplyRefusesPFGUIDs(t *testing.T) {
	const pf = "0000:40:00.0"
	for _, tc := range []struct {
		name string
		guid sysfs.GUID
		want string
	}{
		{"zero", 0, "is unset (zero or all-F)"},
		{"all-F", sysfs.GUIDAllOnes, "is unset (zero or all-F)"},
		{"locally administered", 0xba3fd203005a1c88, "is locally administered, not burned in"},
		{"group bit", 0xb93fd203005a1c88, "has the group bit set"},
		{"no 03:00", 0xb83fd2ff005a1c88, "does not have 03:00 in bytes 4-5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newDGXBoot(t)
			dropIPoIB(t, k)
			rdma := filepath.Join(k.tree.DevicePath(pf), "infiniband", "mlx5_2")
			k.tree.WriteFile(filepath.Join(rdma, "node_guid"), tc.guid.String())
			k.tree.WriteFile(filepath.Join(rdma, "ports", "1", "gids", "0"), sysfstest.GID0(tc.guid.String()))
			k.start()
			res := apply(t, mustParse(t, "linkType: infiniband\npfAltName: \"\"\nvfs: 8\npfs: [{pci: "+pf+"}]\n"), k.root(), 10*time.Second)
			want := "PF " + pf + ": PF GUID cannot seed VF GUIDs: " + tc.guid.Colon() + " " + tc.want
			if len(res.Problems) != 1 || !strings.HasPrefix(res.Problems[0], want) || !strings.Contains(res.Problems[0], "set guids: none") {
				t.Errorf("problems %q, want one starting %q", res.Problems, want)
			}
			if diff := cmp.Diff([]string{"PF " + pf + ": created 8 VFs"}, res.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if v, _ := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath(pf), "sriov_drivers_autoprobe")); v != "1" {
				t.Errorf("sriov_drivers_autoprobe is %q, want 1 (untouched)", v)
			}
			if !slices.ContainsFunc(res.Findings, func(f Finding) bool { return f.Check == finding.CheckGUIDUnderivable && f.Subject == pf }) {
				t.Errorf("no %s finding for PF %s:\n%s", finding.CheckGUIDUnderivable, pf, findingsText(res.Findings))
			}
		})
	}
}

// TestApplyWritesNothingOutsideTheRoot: a tree whose PF link leads out of
// the sysfs root, or whose sriov_numvfs is a link or a FIFO, is refused
// with a problem, and the file outside keeps its content.
func TestApplyWritesNothingOutsideTheRoot(t *testing.T) {
	const pf = "0000:18:00.0"
	spec := "linkType: infiniband\nguids: none\npfAltName: \"\"\nvfs: 8\npfs: [{pci: " + pf + ", vfOffset: 2, vfStride: 1}]\n"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, tree *sysfstest.Tree, outside string) string // returns the outside file
		want  string
	}{
		{"PF link leads outside", func(t *testing.T, tree *sysfstest.Tree, outside string) string {
			dev := filepath.Join(outside, pf)
			if err := os.CopyFS(dev, os.DirFS(tree.DevicePath(pf))); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(tree.Root, "bus", "pci", "devices", pf)
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(dev, link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dev, "sriov_numvfs")
		}, "refused, it leads to "},
		{"sriov_numvfs a link", func(t *testing.T, tree *sysfstest.Tree, outside string) string {
			target := filepath.Join(outside, "sriov_numvfs")
			if err := os.WriteFile(target, []byte("0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			numvfs := filepath.Join(tree.DevicePath(pf), "sriov_numvfs")
			if err := os.Remove(numvfs); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, numvfs); err != nil {
				t.Fatal(err)
			}
			return target
		}, "is a symbolic link to "},
		{"sriov_numvfs a FIFO", func(t *testing.T, tree *sysfstest.Tree, outside string) string {
			numvfs := filepath.Join(tree.DevicePath(pf), "sriov_numvfs")
			if err := os.Remove(numvfs); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(numvfs, 0o600); err != nil {
				t.Fatal(err)
			}
			return ""
		}, "is a FIFO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newDGXBoot(t)
			outsideFile := tc.setup(t, k.tree, t.TempDir())
			res := apply(t, mustParse(t, spec), k.root(), 300*time.Millisecond)
			if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("problems %q, want one saying %q", res.Problems, tc.want)
			}
			if len(res.Changes) != 0 {
				t.Errorf("changes %v, want none", res.Changes)
			}
			if outsideFile != "" {
				if b, err := os.ReadFile(outsideFile); err != nil || strings.TrimSpace(string(b)) != "0" {
					t.Errorf("%s outside the root now holds %q (%v)", outsideFile, b, err)
				}
			}
		})
	}
}

// TestSpecFileResolvesToThePlan: the spec Render installs resolves, without
// any sysfs, to the plan it was rendered from, and renders the same files.
func TestSpecFileResolvesToThePlan(t *testing.T) {
	for _, tc := range []struct {
		spec string
		k    func(testing.TB) *kernel
	}{{"dgx-h200.yaml", newDGXBoot}, {"igb-lab.yaml", newIGBBoot}} {
		t.Run(tc.spec, func(t *testing.T) {
			p := mustResolve(t, readSpec(t, tc.spec), tc.k(t).root())
			files := render(t, p)
			i := slices.IndexFunc(files, func(f File) bool { return f.Path == SpecPath })
			if i < 0 {
				t.Fatalf("no %s rendered", SpecPath)
			}
			installed, err := ParseSpec(files[i].Data)
			if err != nil {
				t.Fatalf("the rendered spec does not parse: %v\n%s", err, files[i].Data)
			}
			again := mustResolve(t, installed, "")
			if diff := cmp.Diff(p.PFs, again.PFs, cmpopts.IgnoreFields(PFPlan{}, "Entry")); diff != "" {
				t.Errorf("the installed spec resolves to another plan (-generated +installed):\n%s", diff)
			}
			if diff := cmp.Diff(fileMap(files), fileMap(render(t, again))); diff != "" {
				t.Errorf("the installed spec renders other files (-generated +installed):\n%s", diff)
			}
		})
	}
}

func TestGUIDAddr(t *testing.T) {
	g := sysfs.GUID(0xba3fd200055a1b20)
	if got := guidAddr(g).String(); got != g.Colon() || got != "ba:3f:d2:00:05:5a:1b:20" {
		t.Errorf("guidAddr(%s) = %s, want the bytes in iproute2's order", g, got)
	}
}

// inNetns runs fn in a new network namespace, where the links a test makes
// and renames are its own.
func inNetns(t *testing.T, fn func()) {
	t.Helper()
	testutil.RequireRoot(t, "a network namespace with veth links to name")
	n := testutil.NewNetns(t)
	if err := n.Do(func(ns.NetNS) error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// addVeth makes a veth pair in the current netns: name (with altnames,
// up or down) and its peer name+"p".
func addVeth(t *testing.T, name string, up bool, altNames ...string) netlink.Link {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range altNames {
		if err := netlink.LinkAddAltName(l, a); err != nil {
			t.Fatalf("altname %s on %s: %v", a, name, err)
		}
	}
	if up {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestNameLink renames real links (veths in a private netns, which sysfs
// names as a fixture's netdevs): down and up again when up, left down when
// down, altname added; a name or altname another link holds is a problem
// and nothing changes.
func TestNameLink(t *testing.T) {
	tree := sysfstest.New(t)
	for i, dev := range []string{"hca", "hcb", "hcd", "hce"} {
		tree.AddDevice(fmt.Sprintf("0000:01:10.%d", i), sysfstest.Device{Vendor: "0x8086", Driver: "igbvf", NetDev: dev})
	}
	inNetns(t, func() {
		addVeth(t, "hca", true)
		addVeth(t, "hcb", false)
		addVeth(t, "hcc", false, "alt-taken")
		addVeth(t, "hcd", false)
		addVeth(t, "hce", false)
		a, err := newApplier(&Spec{WaitSeconds: 1}, ApplyOptions{SysfsRoot: tree.Root, Netlink: true, Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()

		a.nameLink("VF 0000:01:10.0", "0000:01:10.0", "lab0vf0", "vf-0000-01-10.0")
		a.nameLink("VF 0000:01:10.1", "0000:01:10.1", "lab0vf1", "")
		a.nameLink("VF 0000:01:10.2", "0000:01:10.2", "hcc", "")
		a.nameLink("VF 0000:01:10.3", "0000:01:10.3", "", "alt-taken")
		wantChanges := []string{
			"VF 0000:01:10.0: renamed hca to lab0vf0",
			"VF 0000:01:10.0: added altname vf-0000-01-10.0 to lab0vf0",
			"VF 0000:01:10.1: renamed hcb to lab0vf1",
		}
		wantProblems := []string{
			"VF 0000:01:10.2: cannot rename hcd to hcc: hcc has that name or altname",
			"VF 0000:01:10.3: altname alt-taken is held by hcc, not hce",
		}
		if diff := cmp.Diff(wantChanges, a.res.Changes); diff != "" {
			t.Errorf("changes (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantProblems, a.res.Problems); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
		for name, want := range map[string]struct {
			up   bool
			alts []string
		}{"lab0vf0": {true, []string{"vf-0000-01-10.0"}}, "lab0vf1": {false, nil}, "hcd": {false, nil}, "hce": {false, nil}} {
			l, err := netlinksafe.LinkByName(name)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if up := l.Attrs().Flags&1 != 0; up != want.up || !slices.Equal(l.Attrs().AltNames, want.alts) {
				t.Errorf("%s: up %v altnames %v, want up %v altnames %v", name, up, l.Attrs().AltNames, want.up, want.alts)
			}
		}
	})
}

// TestApplyAddsAltNames: on the lab's node as the unit leaves it, with
// real links for its netdevs, Apply adds the altnames three VFs lack and
// nothing else, the Checker then reads every altname through netlink and
// finds nothing, and a second run changes nothing.
func TestApplyAddsAltNames(t *testing.T) {
	k := newIGBBoot(t)
	p := mustResolve(t, readSpec(t, "igb-lab.yaml"), k.root())
	bringUp(t, k, p)
	inNetns(t, func() {
		pf := p.PFs[0]
		addVeth(t, "enp1s0", true, pf.AltName)
		for _, vf := range pf.VFs {
			var alts []string
			if vf.Index < 4 {
				alts = append(alts, vf.AltName)
			}
			addVeth(t, vf.Name, vf.Index%2 == 0, alts...)
		}
		run := func() *ApplyResult {
			res, err := Apply(context.Background(), p.Spec, ApplyOptions{SysfsRoot: k.root(), Wait: time.Second, Netlink: true, Log: testLog(t)})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		res := run()
		var want []string
		for _, vf := range pf.VFs[4:] {
			want = append(want, fmt.Sprintf("VF %s: added altname %s to %s", vf.PCI, vf.AltName, vf.Name))
		}
		if diff := cmp.Diff(want, res.Changes); diff != "" || !res.OK() || len(res.Findings) != 0 {
			t.Errorf("changes (-want +got):\n%s\nproblems %v, findings:\n%s", diff, res.Problems, findingsText(res.Findings))
		}
		if again := run(); len(again.Changes) != 0 || !again.OK() {
			t.Errorf("second run: changes %v, problems %v", again.Changes, again.Problems)
		}
	})
}
