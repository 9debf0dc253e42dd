//go:build labguest

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// labVFName is the spec's vfName pattern for the lab: lab{pfidx}vf{vf}.
func labVFName(pfIdx, vfIdx int) string { return fmt.Sprintf("lab%dvf%d", pfIdx, vfIdx) }

// TestLab12HostConfig: `sriov-stable-agent hostconfig` generates the node's
// files for the two igb PFs (listed by PCI address, link type ethernet,
// VF names lab{pfidx}vf{vf}) from the guest's sysfs; one .link file per VF
// names the VF's PCI path, its Name= and the plugin's altname. With the VFs
// removed, as at boot, the agent and the generated spec are installed where
// the unit expects them (`sriov-stable-agent install --dir /usr/local/bin`,
// /etc/sriov-stable/node.yaml) and the unit's ExecStart= runs as systemd
// would run it (`hostconfig apply`), with no udev: it creates the VFs, skips
// the GUID steps (Ethernet) and applies the .link files' names and altnames
// itself. Then every VF carries exactly what its .link file says, a second
// run changes nothing, `hostconfig --check` passes against the guest's
// /sys, a chain ADD finds a VF so named and DEL gives it back under its
// generated name, and `doctor --spec` agrees with `hostconfig --check`.
func TestLab12HostConfig(t *testing.T) {
	e := newEnv(t)
	specPath := filepath.Join(e.dir, "node.yaml")
	out := filepath.Join(e.dir, "hostconfig")
	if err := os.WriteFile(specPath, []byte(labSpec(theLab.PFs)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, nil, tool("sriov-stable-agent"), "hostconfig", "--spec", specPath, "--sysfs-root", "/sys", "--out", out)
	t.Logf("hostconfig --out exited %d after %s:\n%s%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("hostconfig --out exited %d", r.code)
	}
	links := readLinkFiles(t, filepath.Join(out, "etc/systemd/network"))
	for i, p := range theLab.PFs {
		want := linkFile{Path: "pci-" + p.PCI, AltName: "pf-" + strings.ReplaceAll(p.PCI, ":", "-")}
		if got := links[want.Path]; got != want {
			t.Fatalf("PF %s: .link file says %+v, want %+v", p.PCI, got, want)
		}
		for j, v := range p.VFs {
			want := linkFile{Path: "pci-" + v.PCI, Name: labVFName(i, j), AltName: altNameOf(v)}
			if got := links[want.Path]; got != want {
				t.Fatalf("%s: .link file says %+v, want %+v", v, got, want)
			}
		}
	}
	if n := len(theLab.allVFs()) + len(theLab.PFs); len(links) != n {
		t.Fatalf("%d .link files, want %d", len(links), n)
	}
	argv, environ := unitCommand(t, filepath.Join(out, "etc/systemd/system/sriov-stable-vfs.service"))
	installed := installForUnit(t, out, argv[0])

	// Boot: no VFs yet. From here on the lab's VFs must be re-read (new
	// MACs), or re-created if apply failed to.
	t.Cleanup(func() {
		if err := theLab.reload(); err != nil {
			t.Errorf("hygiene: VFs after hostconfig: %v", err)
		}
		for _, p := range theLab.PFs {
			dropAltNames(t, p.Link, "pf-")
		}
	})
	removeAllVFs(t)

	// Run the unit's command line as systemd would, with its Environment=.
	r = run(t, environ, argv[0], argv[1:]...)
	t.Logf("boot: %s exited %d after %s:\n%s%s", strings.Join(argv, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("the unit's command exited %d", r.code)
	}
	for _, p := range theLab.PFs {
		if want := fmt.Sprintf(`msg="created %d VFs" subject="PF %s"`, len(p.VFs), p.PCI); !strings.Contains(r.stderr, want) {
			t.Fatalf("the unit's command did not log %s", want)
		}
	}
	if err := theLab.reload(); err != nil {
		t.Fatalf("VFs after the unit's command: %v", err)
	}
	for _, v := range theLab.allVFs() {
		l, err := rootLinkOf(v.PCI)
		if err != nil {
			t.Fatal(err)
		}
		want := links["pci-"+v.PCI]
		if l.Attrs().Name != want.Name || !hasAltName(l, want.AltName) {
			t.Fatalf("%s is %s with altnames %v, its .link file says %s with %s", v, l.Attrs().Name, l.Attrs().AltNames, want.Name, want.AltName)
		}
	}
	for _, p := range theLab.PFs {
		if l, err := linkByName(p.Link); err != nil || !hasAltName(l, links["pci-"+p.PCI].AltName) {
			t.Fatalf("PF %s lacks altname %s: %v %v", p.Link, links["pci-"+p.PCI].AltName, err, l)
		}
	}
	t.Logf("%d VFs named as their .link files say, e.g. %s = %s altname %s", len(theLab.allVFs()),
		theLab.PFs[1].VFs[3].PCI, links["pci-"+theLab.PFs[1].VFs[3].PCI].Name, links["pci-"+theLab.PFs[1].VFs[3].PCI].AltName)

	r = run(t, environ, argv[0], argv[1:]...)
	t.Logf("second run exited %d after %s:\n%s%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("the second run exited %d", r.code)
	}
	if !strings.Contains(r.stdout, "0 change(s), 0 problem(s)") {
		t.Fatalf("the second run changed something")
	}
	for _, change := range []string{"created", "renamed", "removed", "added altname", "node GUID"} {
		if strings.Contains(r.stderr, change) {
			t.Fatalf("the second run changed something (%q)", change)
		}
	}

	r = run(t, nil, tool("sriov-stable-agent"), "hostconfig", "--spec", installed, "--check")
	t.Logf("hostconfig --check exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "ok: the node matches the spec") {
		t.Fatalf("hostconfig --check exited %d, want 0 and ok", r.code)
	}

	// A VF named by the hostconfig, in the chain: found by PCI, back home
	// under its generated name with its altname after DEL. Its first link
	// up after creation takes seconds under TCG: wait for it.
	v := theLab.PFs[1].VFs[3]
	a := e.attach(newPod(t, "hostconfig"), v, opts{plugin: map[string]any{"portWaitMs": 30000}})
	mustAdd(t, a)
	mustCheck(t, a)
	mustDel(t, a)
	host, err := rootLinkOf(v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if want := links["pci-"+v.PCI]; host.Attrs().Name != want.Name || !hasAltName(host, want.AltName) {
		t.Fatalf("after DEL the host sees %s as %s %v, want %s with %s", v.PCI, host.Attrs().Name, host.Attrs().AltNames, want.Name, want.AltName)
	}
	wantRecords(t, e, 0)

	// The doctor with the spec must agree with hostconfig --check.
	r = run(t, nil, tool("sriov-stable-agent"), "doctor", "--spec", installed, "--kmsg=")
	t.Logf("doctor --spec exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, " 0 errors, 0 warnings") {
		t.Errorf("doctor --spec exited %d with findings, want 0 and none, as hostconfig --check found none", r.code)
	}
}

// installForUnit puts on the guest what the unit's command needs, as the
// install steps `hostconfig --out` prints do: the agent at agent (argv[0]
// of ExecStart=) through `sriov-stable-agent install`, and the generated
// spec at /etc/sriov-stable/node.yaml. The guest has neither systemd nor
// udev, so the unit and the .link files stay in out. It returns the
// installed spec's path; both are removed when the test ends.
func installForUnit(t testing.TB, out, agent string) string {
	t.Helper()
	const spec = "/etc/sriov-stable/node.yaml"
	remove := []string{agent}
	if _, err := os.Stat(filepath.Dir(agent)); err != nil {
		// The guest's initramfs has no /usr/local/bin; a node has.
		if err := os.MkdirAll(filepath.Dir(agent), 0o755); err != nil {
			t.Fatal(err)
		}
		remove = []string{filepath.Dir(agent)}
	}
	t.Cleanup(func() {
		for _, path := range append(remove, filepath.Dir(spec)) {
			if err := os.RemoveAll(path); err != nil {
				t.Errorf("hygiene: %v", err)
			}
		}
	})
	r := run(t, nil, tool("sriov-stable-agent"), "install", "--dir", filepath.Dir(agent))
	if r.code != 0 || filepath.Base(agent) != "sriov-stable-agent" {
		t.Fatalf("install the agent as %s: exit %d:\n%s%s", agent, r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return spec
}

// labSpec is node.yaml for the lab's PFs, listed by PCI address.
func labSpec(pfs []pf) string {
	var b strings.Builder
	fmt.Fprintf(&b, "linkType: ethernet\nvfs: %d\nvfName: \"lab{pfidx}vf{vf}\"\nwaitSeconds: 30\npfs:\n", *numVFs)
	for _, p := range pfs {
		fmt.Fprintf(&b, "  - pci: %q\n", p.PCI)
	}
	return b.String()
}

// linkFile is what a systemd .link file matches and sets.
type linkFile struct{ Path, Name, AltName string }

// readLinkFiles reads every .link file in dir, keyed by its Path=.
func readLinkFiles(t testing.TB, dir string) map[string]linkFile {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.link"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .link files in %s: %v", dir, err)
	}
	out := map[string]linkFile{}
	for _, f := range files {
		var l linkFile
		for _, kv := range iniValues(t, f) {
			switch key, val := kv[0], kv[1]; key {
			case "Path":
				l.Path = val
			case "Name":
				l.Name = val
			case "AlternativeName":
				l.AltName = val
			}
		}
		if _, dup := out[l.Path]; dup || l.Path == "" {
			t.Fatalf("%s: Path=%q missing or twice", f, l.Path)
		}
		out[l.Path] = l
	}
	return out
}

// unitCommand returns the unit's ExecStart= as arguments (the generated
// unit quotes nothing) and its Environment= settings.
func unitCommand(t testing.TB, unit string) ([]string, []string) {
	t.Helper()
	var argv, environ []string
	for _, kv := range iniValues(t, unit) {
		switch key, val := kv[0], kv[1]; key {
		case "ExecStart":
			argv = strings.Fields(val)
		case "Environment":
			environ = append(environ, strings.Fields(val)...)
		}
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) || strings.ContainsAny(strings.Join(argv, ""), "\"'$%") {
		t.Fatalf("%s: ExecStart=%q, want an absolute path and plain arguments", unit, argv)
	}
	return argv, environ
}

// iniValues lists a systemd unit file's key=value lines in order (keys may
// repeat).
func iniValues(t testing.TB, path string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kv [][2]string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			kv = append(kv, [2]string{k, v})
		}
	}
	return kv
}

// removeAllVFs removes every PF's VFs, as a node has none at boot.
// Equivalent to: echo 0 > /sys/bus/pci/devices/$pf/sriov_numvfs
func removeAllVFs(t testing.TB) {
	t.Helper()
	start := time.Now()
	for _, p := range theLab.PFs {
		if err := os.WriteFile(filepath.Join(sysPCI, p.PCI, "sriov_numvfs"), []byte("0"), 0); err != nil {
			t.Fatalf("remove the VFs of %s: %v", p.PCI, err)
		}
	}
	t.Logf("removed every VF in %s", time.Since(start).Round(time.Millisecond))
}

// linkByName finds a link in the root netns. Equivalent to: ip link show $name
func linkByName(name string) (netlink.Link, error) {
	var l netlink.Link
	err := withHandle(rootNetns, func(h netlinksafe.Handle) (err error) {
		l, err = h.LinkByName(name)
		return err
	})
	return l, err
}

// dropAltNames removes a root-netns link's altnames that start with prefix.
func dropAltNames(t testing.TB, name, prefix string) {
	l, err := linkByName(name)
	if err != nil {
		t.Errorf("hygiene: %v", err)
		return
	}
	var drop []string
	for _, a := range l.Attrs().AltNames {
		if strings.HasPrefix(a, prefix) {
			drop = append(drop, a)
		}
	}
	if err := delAltNames(rootNetns, l, drop); err != nil {
		t.Errorf("hygiene: %v", err)
	}
}
