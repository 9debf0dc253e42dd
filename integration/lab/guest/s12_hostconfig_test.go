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
// removed, as at boot, the generated unit's command line (its ExecStart=
// with its Environment=) runs the generated script under busybox sh with
// iproute2's ip and no udev: it creates the VFs, skips the GUID steps
// (Ethernet) and applies the .link files' names and altnames itself. Then
// every VF carries exactly what its .link file says, a second run changes
// nothing, `hostconfig --check` passes against the guest's /sys, a chain
// ADD finds a VF so named and DEL gives it back under its generated name,
// and `doctor --spec` agrees with `hostconfig --check`.
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
	command, environ := unitCommand(t, filepath.Join(out, "etc/systemd/system/sriov-stable-vfs.service"))

	// Boot: no VFs yet. From here on the lab's VFs must be re-read (new
	// MACs), or re-created if the script failed to.
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
	// busybox sh runs its own ip applet, which knows no altnames: the
	// script's documented knob points it at iproute2's.
	environ = append(environ, "SRIOV_STABLE_IP=/sbin/ip")
	script := filepath.Join(out, command)
	r = run(t, environ, script)
	t.Logf("boot: %s (%s) exited %d after %s:\n%s%s", command, strings.Join(environ, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("the generated script exited %d", r.code)
	}
	if err := theLab.reload(); err != nil {
		t.Fatalf("VFs after the script: %v", err)
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

	r = run(t, environ, script)
	t.Logf("second run exited %d after %s:\n%s", r.code, r.took.Round(time.Millisecond), r.stderr)
	if r.code != 0 {
		t.Fatalf("the second run exited %d", r.code)
	}
	for _, change := range []string{"creating", "renaming", "removing", "node_guid"} {
		if strings.Contains(r.stderr, change) {
			t.Fatalf("the second run changed something (%q)", change)
		}
	}

	r = run(t, nil, tool("sriov-stable-agent"), "hostconfig", "--spec", specPath, "--check")
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
	r = run(t, nil, tool("sriov-stable-agent"), "doctor", "--spec", specPath, "--kmsg=")
	t.Logf("doctor --spec exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, " 0 errors, 0 warnings") {
		t.Errorf("doctor --spec exited %d with findings, want 0 and none, as hostconfig --check found none", r.code)
	}
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

// unitCommand returns the unit's ExecStart= and Environment= settings.
func unitCommand(t testing.TB, unit string) (string, []string) {
	t.Helper()
	var command string
	var environ []string
	for _, kv := range iniValues(t, unit) {
		switch key, val := kv[0], kv[1]; key {
		case "ExecStart":
			command = val
		case "Environment":
			environ = append(environ, strings.Fields(val)...)
		}
	}
	if command == "" || strings.ContainsAny(command, " \t") {
		t.Fatalf("%s: ExecStart=%q, want one absolute path", unit, command)
	}
	return command, environ
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
