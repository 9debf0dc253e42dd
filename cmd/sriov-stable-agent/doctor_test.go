package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func runDoctorCmd(args ...string) (code int, stdout, stderr string) {
	return runAgent(context.Background(), append([]string{"doctor"}, args...)...)
}

func TestDoctorCommandExitCodes(t *testing.T) {
	healthy := sysfstest.NewDGXH200(t)
	broken := sysfstest.NewDGXH200(t)
	broken.WriteFile(filepath.Join(broken.RDMAPath(broken.PFs[0].PCI, broken.PFs[0].RDMA), "fw_ver"), "28.39.1002")

	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"healthy", []string{"--sysfs-root", healthy.Root, "--kmsg", "", "--expect-vfs", "8", "--link-layer", "infiniband"}, 0, "8 Mellanox PFs, 64 VFs"},
		{"warnings only", []string{"--sysfs-root", healthy.Root, "--kmsg", "", "--expect-vfs", "8", "--name-pattern", "^vf[0-9]+$"}, 0, "warning"},
		{"errors", []string{"--sysfs-root", broken.Root, "--kmsg", ""}, 1, "firmware-version  0000:18:00.0"},
		{"help", []string{"--help"}, 0, "Exit status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDoctorCmd(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.contains) {
				t.Errorf("doctor %v: exit %d, want %d; want output containing %q:\n%s%s", tc.args, code, tc.code, tc.contains, out, errOut)
			}
		})
	}
}

func TestDoctorCommandUsageErrors(t *testing.T) {
	root := sysfstest.New(t).Root
	badSpec := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(badSpec, []byte("vfs: 8\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--sysfs-root", root, "--spec", filepath.Join(root, "no-such-spec.yaml")},
		{"--sysfs-root", root, "--spec", badSpec},
		{"--sysfs-root", filepath.Join(root, "missing")},
		{"--sysfs-root", root, "--link-layer", "ib"},
		{"--sysfs-root", root, "--alt-name", "vf/{pci}"},
		{"--sysfs-root", root, "--name-pattern", "("},
		{"--sysfs-root", root, "extra"},
		{"--no-such-flag"},
	} {
		code, out, errOut := runDoctorCmd(args...)
		if code != 2 || errOut == "" {
			t.Errorf("doctor %v: exit %d with stderr %q, want 2 and a reason\n%s", args, code, errOut, out)
		}
	}
}

func TestDoctorCommandJSON(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	v := n.PFs[1].VFs[2]
	n.SetRDMA(v.PCI, sysfstest.RDMA{Name: v.RDMA, NodeGUID: "0000:0000:0000:0000", Ports: []sysfstest.Port{{GID0: sysfstest.GID0(v.PortGUID)}}})
	code, out, errOut := runDoctorCmd("--sysfs-root", n.Root, "--kmsg", "", "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	var rep struct {
		PFs, VFs, Errors int
		Findings         []doctor.Finding
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	var got []string
	for _, f := range rep.Findings {
		if f.Severity == doctor.SeverityError {
			got = append(got, f.Check+" "+f.Subject)
		}
	}
	if rep.PFs != 8 || rep.VFs != 64 || rep.Errors != 1 || len(got) != 1 || got[0] != "guid-invalid "+v.PCI {
		t.Errorf("JSON report: %d PFs, %d VFs, %d errors %v; want 8, 64 and guid-invalid %s", rep.PFs, rep.VFs, rep.Errors, got, v.PCI)
	}
}

// On this machine's /sys (no Mellanox devices in CI) the doctor says so
// and exits 0.
func TestDoctorCommandRealSys(t *testing.T) {
	if _, err := os.Stat("/sys/bus/pci/devices"); err != nil {
		t.Skipf("no /sys/bus/pci/devices here: %v", err)
	}
	code, out, errOut := runDoctorCmd()
	if strings.Contains(out, "0 Mellanox PFs, 0 VFs") {
		if code != 0 || !strings.Contains(out, "no Mellanox (vendor 0x15b3) PCI devices") {
			t.Errorf("exit %d, want 0 and a line saying there are no Mellanox devices:\n%s%s", code, out, errOut)
		}
		return
	}
	if code == 2 {
		t.Errorf("doctor could not check this machine:\n%s%s", out, errOut)
	}
}

// TestDoctorCommandHostileFiles: the doctor finishes on a node whose
// fw_ver is a FIFO (an attribute whose read never returns, as a fixture
// stands for it) and reports it as a sysfs finding; a FIFO or a link to
// /dev/zero given as --spec is a usage error naming what it is.
func TestDoctorCommandHostileFiles(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf := n.PFs[0]
	safefiletest.FIFO(t, filepath.Join(n.RDMAPath(pf.PCI, pf.RDMA), "fw_ver"))
	var code int
	var out, errOut string
	safefiletest.Within(t, safefiletest.Prompt, "doctor", func() { code, out, errOut = runDoctorCmd("--sysfs-root", n.Root, "--kmsg", "", "--json") })
	var rep struct{ Findings []doctor.Finding }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s%s", err, out, errOut)
	}
	var sysfsFindings []string
	for _, f := range rep.Findings {
		if f.Check == finding.CheckSysfs {
			sysfsFindings = append(sysfsFindings, f.Subject+": "+f.Message)
		}
	}
	if code != 1 || len(sysfsFindings) != 1 || !strings.HasPrefix(sysfsFindings[0], pf.PCI+": ") ||
		!strings.Contains(sysfsFindings[0], "fw_ver is a FIFO, not a regular file") {
		t.Errorf("doctor with a FIFO fw_ver: exit %d, sysfs findings %q; want exit 1 and one about %s's fw_ver", code, sysfsFindings, pf.PCI)
	}

	dir := t.TempDir()
	fifo, zero := filepath.Join(dir, "fifo.yaml"), filepath.Join(dir, "node.yaml")
	safefiletest.FIFO(t, fifo)
	safefiletest.Symlink(t, "/dev/zero", zero)
	for spec, says := range map[string]string{
		fifo: fifo + " is a FIFO, not a regular file",
		zero: zero + " is a symbolic link to /dev/zero, a character device, not a regular file",
	} {
		safefiletest.Within(t, safefiletest.Prompt, "doctor --spec", func() { code, out, errOut = runDoctorCmd("--sysfs-root", n.Root, "--spec", spec) })
		if code != 2 || !strings.Contains(errOut, says) {
			t.Errorf("doctor --spec %s: exit %d, stderr %q; want 2 and %q", filepath.Base(spec), code, errOut, says)
		}
	}
}
