package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func runHostconfigCmd(args ...string) (code int, stdout, stderr string) {
	return runAgent(context.Background(), append([]string{"hostconfig"}, args...)...)
}

func TestHostconfigUsage(t *testing.T) {
	spec := testutil.WriteTemp(t, "node.yaml", "vfs: 8\npfs: [{pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}]\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no spec", []string{"--out", t.TempDir()}, 2, "--spec is required"},
		{"neither out nor check", []string{"--spec", spec}, 2, "give either --out DIR or --check"},
		{"both", []string{"--spec", spec, "--out", t.TempDir(), "--check"}, 2, "give either --out DIR or --check"},
		{"json without check", []string{"--spec", spec, "--out", t.TempDir(), "--json"}, 2, "--json goes with --check"},
		{"stray argument", []string{"--spec", spec, "--check", "extra"}, 2, `unexpected argument "extra"`},
		{"unknown flag", []string{"--specs", spec}, 2, "flag provided but not defined: -specs"},
		{"help", []string{"--help"}, 0, "sriov-stable-agent hostconfig --spec node.yaml --out DIR"},
		{"missing spec file", []string{"--spec", filepath.Join(t.TempDir(), "none.yaml"), "--check"}, 1, "read hostconfig spec: open"},
		{"bad spec", []string{"--spec", testutil.WriteTemp(t, "node.yaml", "vfs: 8\nlinkType: roce\npfs: [{pci: 0000:18:00.0}]\n"), "--check"}, 1,
			`node.yaml: invalid hostconfig spec: linkType: "roce" is not one of infiniband, ethernet, auto`},
		{"apply help", []string{"apply", "--help"}, 0, "usage: sriov-stable-agent hostconfig apply --spec FILE"},
		{"apply without spec", []string{"apply"}, 2, "sriov-stable-agent hostconfig apply: --spec is required"},
		{"apply negative wait", []string{"apply", "--spec", spec, "--wait", "-1s"}, 2, "--wait -1s is negative"},
		{"apply stray argument", []string{"apply", "--spec", spec, "now"}, 2, `unexpected argument "now"`},
		{"apply bad spec", []string{"apply", "--spec", testutil.WriteTemp(t, "node.yaml", "vfs: 8\nlinkType: roce\npfs: [{pci: 0000:18:00.0}]\n")}, 1,
			`invalid hostconfig spec: linkType: "roce"`},
		{"unresolvable offline", []string{"--spec", testutil.WriteTemp(t, "node.yaml", "vfs: 8\npfs: [{pci: 0000:18:00.0}]\n"), "--out", t.TempDir()}, 1,
			"VF addresses unknown: run with --sysfs-root /sys on the node, or set vfOffset and vfStride"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runHostconfigCmd(tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("hostconfig %v: exit %d, want %d; want output containing %q:\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
			}
		})
	}
}

// TestHostconfigOut: --out writes the tree the hostconfig package pins in
// its golden files for the DGX H200, and says how to install it with the
// agent the unit runs.
func TestHostconfigOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runHostconfigCmd("--spec", filepath.Join("..", "..", "pkg", "hostconfig", "testdata", "dgx-h200-pci.yaml"), "--out", out)
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"wrote 74 files for 8 PFs and 64 VFs", "10-sriov-stable-*.link (72)", "etc/sriov-stable/node.yaml    # the spec the unit applies",
		"sriov-stable-agent install --dir /usr/local/bin    # the unit runs /usr/local/bin/sriov-stable-agent",
		"systemctl daemon-reload && systemctl enable --now sriov-stable-vfs.service"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	golden := filepath.Join("..", "..", "pkg", "hostconfig", "testdata", "golden", "dgx-h200")
	wantFiles := readTree(t, golden)
	gotFiles := readTree(t, out)
	if len(gotFiles) != len(wantFiles) {
		t.Errorf("wrote %d files, golden has %d", len(gotFiles), len(wantFiles))
	}
	for path, want := range wantFiles {
		if !bytes.Equal(gotFiles[path], want) {
			t.Errorf("%s differs from %s", path, filepath.Join(golden, path))
		}
	}
	if _, err := os.Stat(filepath.Join(out, "usr")); err == nil {
		t.Errorf("%s/usr exists: the script the unit ran before hostconfig apply is no longer generated", out)
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[rel], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// ibNode is a small InfiniBand node as the unit leaves it: PF 0000:18:00.0
// with VFs 0000:18:00.2 and .3 named ib0v0 and ib0v1, with the derived
// GUIDs.
func ibNode(t *testing.T) *sysfstest.Tree {
	t.Helper()
	const pf = "0000:18:00.0"
	pfGUID := "b83f:d203:005a:1b20"
	tree := sysfstest.New(t)
	tree.AddPF(pf, 16, sysfstest.Device{NetDev: "ibp24s0f0", RDMA: &sysfstest.RDMA{Name: "mlx5_0", NodeGUID: pfGUID,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(pfGUID)}}}})
	vfGUIDs := []string{"ba3f:d200:005a:1b20", "ba3f:d200:015a:1b20"}
	portGUIDs := []string{"ba3f:d280:005a:1b20", "ba3f:d280:015a:1b20"}
	for i, vf := range []string{"0000:18:00.2", "0000:18:00.3"} {
		tree.AddVF(pf, i, vf, sysfstest.Device{NetDev: "ib0v" + string(rune('0'+i)), RDMA: &sysfstest.RDMA{
			Name: "mlx5_" + string(rune('1'+i)), NodeGUID: vfGUIDs[i], Ports: []sysfstest.Port{{GID0: sysfstest.GID0(portGUIDs[i])}}}})
	}
	return tree
}

// TestHostconfigCheck runs --check on ibNode, then with one VF's GUID gone.
func TestHostconfigCheck(t *testing.T) {
	tree := ibNode(t)
	spec := testutil.WriteTemp(t, "node.yaml", "linkType: infiniband\nvfs: 2\npfs: [{pci: 0000:18:00.0}]\n")

	code, out, errOut := runHostconfigCmd("--spec", spec, "--check", "--sysfs-root", tree.Root)
	if code != 0 || !strings.Contains(out, "ok: the node matches the spec") {
		t.Fatalf("healthy node: exit %d:\n%s%s", code, out, errOut)
	}

	tree.WriteFile(filepath.Join(tree.RDMAPath("0000:18:00.3", "mlx5_2"), "node_guid"), "0000:0000:0000:0000")
	code, out, errOut = runHostconfigCmd("--spec", spec, "--check", "--sysfs-root", tree.Root)
	if code != 1 || !strings.Contains(out, "error   0000:18:00.3: node GUID is 00:00:00:00:00:00:00:00 (unset), want ba:3f:d2:00:01:5a:1b:20") ||
		!strings.Contains(out, "1 error(s), 0 warning(s)") {
		t.Errorf("zero GUID: exit %d:\n%s%s", code, out, errOut)
	}

	code, out, errOut = runHostconfigCmd("--spec", spec, "--check", "--json", "--sysfs-root", tree.Root)
	var findings []hostconfig.Finding
	if err := json.Unmarshal([]byte(out), &findings); err != nil {
		t.Fatalf("--json output is not a list of findings: %v\n%s%s", err, out, errOut)
	}
	if code != 1 || len(findings) != 1 || findings[0].Check != finding.CheckGUIDInvalid || findings[0].Subject != "0000:18:00.3" ||
		findings[0].Severity != hostconfig.SeverityError || findings[0].Remedy == "" {
		t.Errorf("--json: exit %d, findings %+v", code, findings)
	}
}

// TestHostconfigApply runs `hostconfig apply` as the unit does on a small
// InfiniBand node: one that matches changes nothing and exits 0; one whose
// PF has other VFs than the spec says exits 1 within the wait (no kernel
// here removes them), its log naming the PF. A spec with the old
// scriptPath still applies, with a warning.
func TestHostconfigApply(t *testing.T) {
	tree := ibNode(t)
	spec := testutil.WriteTemp(t, "node.yaml", "linkType: infiniband\nvfs: 2\npfs: [{pci: 0000:18:00.0}]\nscriptPath: /usr/local/sbin/sriov-stable-vfs\n")
	code, out, errOut := runHostconfigCmd("apply", "--spec", spec, "--sysfs-root", tree.Root)
	if code != 0 || !strings.Contains(out, "0 change(s), 0 problem(s)") || !strings.Contains(out, "ok: the node matches the spec") ||
		!strings.Contains(errOut, "warning: "+spec+": scriptPath is ignored") {
		t.Errorf("matching node: exit %d:\n%s%s", code, out, errOut)
	}

	more := testutil.WriteTemp(t, "node.yaml", "linkType: infiniband\nvfs: 4\npfs: [{pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}]\n")
	code, out, errOut = runHostconfigCmd("apply", "--spec", more, "--sysfs-root", tree.Root, "--wait", "200ms")
	if code != 1 || !strings.Contains(out, "1 change(s), 1 problem(s)") || !strings.Contains(out, "error   0000:18:00.0: has 0 VFs, the spec wants 4") ||
		!strings.Contains(errOut, `msg="removed its 2 VFs (the spec wants 4)" subject="PF 0000:18:00.0"`) ||
		!strings.Contains(errOut, `level=ERROR msg="its VFs were still there 200ms after writing 0 to `) {
		t.Errorf("PF without its VFs: exit %d:\n%s%s", code, out, errOut)
	}
}
