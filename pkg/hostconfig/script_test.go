package hostconfig

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// shell is one POSIX shell the generated script must run under.
type shell struct {
	name string
	argv []string
}

// shells: dash is Debian's and Ubuntu's /bin/sh, bash what people run by
// hand, busybox sh the QEMU lab's guest.
var allShells = []shell{
	{"dash", []string{"dash"}},
	{"bash", []string{"bash"}},
	{"busybox", []string{"busybox", "sh"}},
}

// forEachShell runs fn under every shell, in parallel; a missing shell is
// a visible skip (install it: apt-get install dash bash busybox).
func forEachShell(t *testing.T, fn func(t *testing.T, sh shell)) {
	for _, sh := range allShells {
		t.Run(sh.name, func(t *testing.T) {
			if _, err := exec.LookPath(sh.argv[0]); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("%s is not installed; .ci/run must install it", sh.argv[0])
				}
				t.Skipf("%s is not installed (apt-get install %s): the script is not exercised under it", sh.argv[0], sh.argv[0])
			}
			t.Parallel()
			fn(t, sh)
		})
	}
}

var dash = allShells[0]

// installScript writes the plan's script into a temp dir.
func installScript(t testing.TB, p *Plan) string {
	t.Helper()
	for _, f := range render(t, p) {
		if strings.HasSuffix("/"+f.Path, p.Spec.ScriptPath) {
			path := filepath.Join(t.TempDir(), "sriov-stable-vfs")
			if err := os.WriteFile(path, f.Data, 0o755); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}
	t.Fatal("no script rendered")
	return ""
}

// runScript runs the script against the fake node: sysfs is the fixture,
// ip is this test binary acting as fakeIP, udev is off.
func runScript(t testing.TB, sh shell, k *kernel, script string, env ...string) (int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh.argv[0], append(sh.argv[1:], script)...)
	cmd.Env = append(os.Environ(),
		"SRIOV_STABLE_SYSFS="+k.root(),
		"SRIOV_STABLE_WAIT=10",
		"SRIOV_STABLE_IP="+self,
		"SRIOV_STABLE_UDEV=no",
		envFakeIPRoot+"="+k.root(),
		envFakeIPState+"="+k.state,
	)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("script did not finish within 2 minutes; log:\n%s", stderr.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run script: %v", err)
		}
		code = ee.ExitCode()
	}
	return code, stderr.String()
}

// assertNodeMatches checks the fixture against the plan directly and
// through Check: every VF present at its address, bound, named, with its
// altname and the GUIDs DeriveVFGUIDs gives (GUIDs only on IB PFs).
func assertNodeMatches(t *testing.T, k *kernel, p *Plan) {
	t.Helper()
	n := node{root: k.root()}
	for _, pf := range p.PFs {
		var pfGUID sysfs.GUID
		ib := k.pf(pf.PCI).ib
		if ib {
			var err error
			if pfGUID, err = n.pfGUID(pf.PCI); err != nil {
				t.Fatal(err)
			}
		}
		for _, vf := range pf.VFs {
			if got := n.virtfn(pf.PCI, vf.Index); got != vf.PCI {
				t.Errorf("PF %s virtfn%d = %q, want %s", pf.PCI, vf.Index, got, vf.PCI)
				continue
			}
			if got := n.netdevs(vf.PCI); !cmp.Equal(got, []string{vf.Name}) {
				t.Errorf("VF %s netdevs %v, want [%s]", vf.PCI, got, vf.Name)
			}
			alts, _ := k.altNamesOf(vf.Name)
			if !contains(alts, vf.AltName) {
				t.Errorf("VF %s (%s) altnames %v, want %s", vf.PCI, vf.Name, alts, vf.AltName)
			}
			if !ib {
				if dir := n.rdma(vf.PCI); dir != "" {
					t.Errorf("Ethernet VF %s has an RDMA device %s", vf.PCI, dir)
				}
				continue
			}
			want, err := DeriveVFGUIDs(pfGUID, vf.Index)
			if err != nil {
				t.Fatal(err)
			}
			dir := n.rdma(vf.PCI)
			gotNode, err1 := nodeGUID(dir)
			gotPort, err2 := portGUID(dir)
			if err1 != nil || err2 != nil || gotNode != want.Node || gotPort != want.Port {
				t.Errorf("VF %s GUIDs node %s port %s (%v, %v), the Go derivation says node %s port %s",
					vf.PCI, gotNode.Colon(), gotPort.Colon(), err1, err2, want.Node.Colon(), want.Port.Colon())
			}
		}
	}
	findings, err := Checker{SysfsRoot: k.root(), AltNames: k.altNamesOf}.Check(p.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		if f.Severity != SeverityInfo {
			t.Errorf("Check after the script: %s", f)
		}
	}
}

func countMatching(lines []string, re string) int {
	r := regexp.MustCompile(re)
	n := 0
	for _, l := range lines {
		if r.MatchString(l) {
			n++
		}
	}
	return n
}

// TestScriptDGXFirstBoot runs the generated script on a DGX H200 at boot
// (no VFs) under each shell: it creates 64 VFs unbound, hands each its
// derived GUIDs, binds them once (no rebind), names them and adds their
// altnames; a second run changes nothing.
func TestScriptDGXFirstBoot(t *testing.T) {
	forEachShell(t, func(t *testing.T, sh shell) {
		k := newDGXBoot(t)
		k.start()
		p := mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root())
		script := installScript(t, p)

		code, out := runScript(t, sh, k, script)
		if code != 0 {
			t.Fatalf("script exited %d:\n%s", code, out)
		}
		if !strings.Contains(out, "ok: 8 PFs, 64 VFs as specified") {
			t.Errorf("no success line in:\n%s", out)
		}
		assertNodeMatches(t, k, p)
		changes := k.ipChanges()
		if n := countMatching(changes, `^link set dev ibp\d+s0f[01] vf [0-7] node_guid ([0-9a-f]{2}:){7}[0-9a-f]{2} port_guid `); n != 64 {
			t.Errorf("%d GUID assignments, want 64:\n%s", n, strings.Join(changes, "\n"))
		}
		if n := countMatching(changes, `^link property add dev \S+ altname (vf|pf)-`); n != 72 {
			t.Errorf("%d altnames added, want 72 (64 VFs, 8 PFs)", n)
		}
		ev := k.takeEvents()
		if n := countMatching(ev, `^unbind `); n != 0 {
			t.Errorf("first boot unbound %d VFs; VFs created unbound need no rebind: %v", n, ev)
		}
		if n := countMatching(ev, `^probe `); n != 64 {
			t.Errorf("%d probes, want one per VF: %v", n, ev)
		}

		before := len(k.ipChanges())
		code, out = runScript(t, sh, k, script)
		if code != 0 {
			t.Fatalf("second run exited %d:\n%s", code, out)
		}
		if after := k.ipChanges(); len(after) != before {
			t.Errorf("second run changed links: %v", after[before:])
		}
		if ev := k.takeEvents(); len(ev) != 0 {
			t.Errorf("second run touched drivers: %v", ev)
		}
	})
}

// TestScriptRepairsGUIDs: VFs that are up with wrong GUIDs (zeroed, or
// another VF's) get the derived ones and an unbind/bind, and only they; the
// rebind gives them new kernel names, which the script fixes again.
func TestScriptRepairsGUIDs(t *testing.T) {
	t.Parallel()
	k := newDGXBoot(t)
	k.start()
	p := mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root())
	script := installScript(t, p)
	if code, out := runScript(t, dash, k, script); code != 0 {
		t.Fatalf("first run exited %d:\n%s", code, out)
	}
	k.takeEvents()
	zeroed, dup, source := p.PFs[2].VFs[3], p.PFs[0].VFs[5], p.PFs[7].VFs[1]
	k.setVFGUIDs(zeroed.PCI, VFGUIDs{})
	g, err := node{root: k.root()}.pfGUID(p.PFs[7].PCI)
	if err != nil {
		t.Fatal(err)
	}
	stolen, _ := DeriveVFGUIDs(g, source.Index)
	k.setVFGUIDs(dup.PCI, stolen)

	code, out := runScript(t, dash, k, script)
	if code != 0 {
		t.Fatalf("repair run exited %d:\n%s", code, out)
	}
	want := []string{"unbind " + zeroed.PCI, "unbind " + dup.PCI, "probe " + zeroed.PCI, "probe " + dup.PCI}
	got := k.takeEvents()
	if diff := cmp.Diff(sortedCopy(want), sortedCopy(got)); diff != "" {
		t.Errorf("driver events (-want +got):\n%s", diff)
	}
	assertNodeMatches(t, k, p)
}

// TestScriptEthernetIGB is the lab's case: an igb PF with 7 VFs, Ethernet.
// The script creates the VFs, names them and adds altnames, and never
// touches GUIDs or rebinds.
func TestScriptEthernetIGB(t *testing.T) {
	forEachShell(t, func(t *testing.T, sh shell) {
		k := newIGBBoot(t)
		k.start()
		p := mustResolve(t, readSpec(t, "igb-lab.yaml"), k.root())
		code, out := runScript(t, sh, k, installScript(t, p))
		if code != 0 {
			t.Fatalf("script exited %d:\n%s", code, out)
		}
		assertNodeMatches(t, k, p)
		for _, c := range k.ipChanges() {
			if strings.Contains(c, "guid") {
				t.Errorf("GUID step ran on an Ethernet PF: ip %s", c)
			}
		}
		if ev := k.takeEvents(); len(ev) != 0 {
			t.Errorf("driver events on an Ethernet PF: %v", ev)
		}
	})
}

// TestScriptFailures: what the script cannot fix it reports with the PF,
// what it expected and what it found, and exits 1.
func TestScriptFailures(t *testing.T) {
	// A few PFs of the DGX fixture per case keep the runs short.
	ib := func(pfs ...string) string {
		return "linkType: infiniband\nvfs: 8\npfs:\n  - " + strings.Join(pfs, "\n  - ") + "\n"
	}
	cases := []struct {
		name    string
		spec    string
		offline bool // resolve without sysfs
		breakIt func(t *testing.T, k *kernel)
		env     []string
		want    []string // substrings of the log
		check   func(t *testing.T, k *kernel, changes []string)
	}{
		{
			name: "InfiniBand expected, Ethernet found",
			spec: ib(`pci: "0000:18:00.0"`, `pci: "0000:40:00.0"`),
			breakIt: func(t *testing.T, k *kernel) {
				k.tree.SetPort("0000:18:00.0", "mlx5_0", 1, sysfstest.Port{LinkLayer: "Ethernet"})
			},
			want: []string{"error: PF 0000:18:00.0 runs Ethernet, the spec wants InfiniBand: set the port to IB (mlxconfig -d 0000:18:00.0 set LINK_TYPE_P1=1) and reboot"},
			check: func(t *testing.T, k *kernel, changes []string) {
				if n := countMatching(changes, `^link set dev ibp24s0f0 vf `); n != 0 {
					t.Errorf("GUIDs assigned through an Ethernet PF %d times", n)
				}
				if n := countMatching(changes, `^link set dev ibp64s0f0 vf `); n != 8 {
					t.Errorf("healthy PF 0000:40:00.0 got %d GUID assignments, want 8", n)
				}
			},
		},
		{
			name: "PF GUID locally administered",
			spec: ib(`pci: "0000:18:00.1"`),
			breakIt: func(t *testing.T, k *kernel) {
				k.tree.SetRDMA("0000:18:00.1", sysfstest.RDMA{Name: "mlx5_1", NodeGUID: "ba3f:d203:005a:1b21",
					Ports: []sysfstest.Port{{GID0: sysfstest.GID0("ba3f:d203:005a:1b21")}}})
			},
			want: []string{"error: PF 0000:18:00.1 GUID ba:3f:d2:03:00:5a:1b:21 cannot seed VF GUIDs"},
			check: func(t *testing.T, k *kernel, changes []string) {
				if n := countMatching(changes, `^link set dev ibp24s0f1 vf `); n != 0 {
					t.Errorf("GUIDs derived from a locally administered PF GUID %d times", n)
				}
			},
		},
		{
			name: "PF without IPoIB netdev",
			spec: ib(`pci: "0000:c0:00.1"`),
			breakIt: func(t *testing.T, k *kernel) {
				k.tree.RemoveNetDev("0000:c0:00.1", "ibp192s0f1")
			},
			want: []string{"error: PF 0000:c0:00.1 has no netdev to set VF GUIDs through: load ib_ipoib"},
		},
		{
			name:    "PF missing",
			spec:    ib(`{pci: "0000:18:00.0", vfOffset: 2, vfStride: 1}`, `{pci: "0000:5e:00.0", vfOffset: 2, vfStride: 1}`),
			offline: true,
			env:     []string{"SRIOV_STABLE_WAIT=1"},
			want:    []string{"error: PF 0000:5e:00.0: no such PCI device under ", " after 1s: is the card present (lspci -s 0000:5e:00.0)"},
		},
		{
			name:    "layout differs from the generated files",
			spec:    ib(`{pci: "0000:18:00.0", vfOffset: 2, vfStride: 1}`, `{pci: "0000:18:00.1", vfOffset: 9, vfStride: 1}`),
			offline: true,
			want:    []string{"error: PF 0000:18:00.1: VF 0 is 0000:18:02.2, the generated files expect 0000:18:01.2: this node's layout differs"},
			check: func(t *testing.T, k *kernel, changes []string) {
				if n := countMatching(changes, `^link set dev ibp24s0f1 `); n != 0 {
					t.Errorf("acted on a PF whose VFs are not where the files say: %v", changes)
				}
			},
		},
		{
			name:    "more VFs than the firmware allows",
			spec:    "linkType: infiniband\nvfs: 20\npfs:\n  - {pci: \"0000:c0:00.1\", vfOffset: 17, vfStride: 1}\n",
			offline: true,
			want:    []string{"error: PF 0000:c0:00.1 supports 16 VFs (sriov_totalvfs), the spec wants 20: raise it in the firmware (mlxconfig -d 0000:c0:00.1 set NUM_OF_VFS=20)"},
		},
		{
			name: "check only changes nothing",
			spec: ib(`match: {vendor: 0x15b3, device: 0x1021}`),
			env:  []string{"SRIOV_STABLE_CHECK_ONLY=yes"},
			want: []string{"error: PF 0000:18:00.0 has 0 VFs, the spec wants 8"},
			check: func(t *testing.T, k *kernel, changes []string) {
				if len(changes) != 0 {
					t.Errorf("check-only run changed links: %v", changes)
				}
				if v, _ := sysfs.ReadAttr(filepath.Join(k.tree.DevicePath("0000:18:00.0"), "sriov_numvfs")); v != "0" {
					t.Errorf("check-only run wrote sriov_numvfs %q", v)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newDGXBoot(t)
			if tc.breakIt != nil {
				tc.breakIt(t, k)
			}
			k.start()
			root := k.root()
			if tc.offline {
				root = ""
			}
			p := mustResolve(t, mustParse(t, tc.spec), root)
			code, out := runScript(t, dash, k, installScript(t, p), tc.env...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			if tc.check != nil {
				tc.check(t, k, k.ipChanges())
			}
		})
	}
}

// TestScriptDeriveGUIDMatchesGo runs the script's own derive_guid (cut out
// of the shipped script) under each shell on thousands of PF GUIDs and VF
// indexes, valid and not, and compares with DeriveVFGUIDs.
func TestScriptDeriveGUIDMatchesGo(t *testing.T) {
	var fns []string
	for _, name := range []string{"is_hex16", "colons", "hex4", "derive_guid"} {
		fns = append(fns, shellFunction(t, scriptTemplate, name))
	}
	prog := strings.Join(fns, "\n") + `
while read -r g v k; do
	if derive_guid "$g" "$v" "$k"; then echo "$_guid"; else echo invalid; fi
done
`
	rng := rand.New(rand.NewPCG(6, 6))
	var in, want strings.Builder
	add := func(pf sysfs.GUID, vf, kind int) {
		fmt.Fprintf(&in, "%016x %d %d\n", uint64(pf), vf, kind)
		g, err := DeriveVFGUIDs(pf, vf)
		switch {
		case err != nil:
			want.WriteString("invalid\n")
		case kind == 0:
			want.WriteString(g.Node.Colon() + "\n")
		default:
			want.WriteString(g.Port.Colon() + "\n")
		}
	}
	for i := 0; i < 1500; i++ {
		pf := realisticPFGUID(rng)
		vf := rng.IntN(64)
		if i%10 == 0 {
			vf = rng.IntN(MaxVFs + 1) // up to 32768, one past the last valid index
		}
		add(pf, vf, i%2)
	}
	for i := 0; i < 500; i++ {
		add(sysfs.GUID(rng.Uint64()), rng.IntN(8), i%2) // almost all outside the domain
	}
	for _, pf := range []sysfs.GUID{0, ^sysfs.GUID(0), 0xb83fd20300000000, 0xba3fd20300a1b2c4, 0xb93fd20300a1b2c4, 0xb83fd20301a1b2c4} {
		add(pf, 0, 0)
		add(pf, 7, 1)
	}
	forEachShell(t, func(t *testing.T, sh shell) {
		cmd := exec.Command(sh.argv[0], append(sh.argv[1:], "-c", prog)...)
		cmd.Stdin = strings.NewReader(in.String())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if diff := cmp.Diff(strings.Split(want.String(), "\n"), strings.Split(string(out), "\n")); diff != "" {
			t.Errorf("shell and Go derivations differ (-go +shell):\n%s", diff)
		}
	})
}

// shellFunction cuts "name() { ... }" out of a script: one line, or up to
// the first "}" alone on a line.
func shellFunction(t *testing.T, script, name string) string {
	t.Helper()
	start := strings.Index(script, "\n"+name+"() {")
	if start < 0 {
		t.Fatalf("script has no function %s", name)
	}
	rest := script[start+1:]
	if first, _, _ := strings.Cut(rest, "\n"); strings.HasSuffix(first, "}") {
		return first
	}
	end := strings.Index(rest, "\n}\n")
	if end < 0 {
		t.Fatalf("function %s does not end", name)
	}
	return rest[:end+2]
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}
