package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.RunPrivileged(m, "demo")) }

// TestDemo runs `make demo`'s program as make runs it, with the binaries
// the suite is given, and checks that it shows what the README says it
// shows, in that order.
func TestDemo(t *testing.T) {
	bins := harness.Bins(t)
	demo := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", demo, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	out, err := exec.Command(demo, "-bin-dir", bins).CombinedOutput()
	if err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out)
	}
	rest := string(out)
	for _, want := range []string{
		"[1] A node, in private namespaces: ConnectX-7 PF 0000:18:00.0, VF 0000:18:00.2",
		"[2] ADD through libcni",
		`"pciID":"0000:18:00.2"`,
		`msg="repaired VF name"`, "was=eth7 now=net1",
		"[3] CHECK through libcni", "CHECK passed",
		"[4] Drift", "CHECK -> error 105: VF 0000:18:00.2 (net1)",
		"renamed: VF 0000:18:00.2 is named eth9, expected net1",
		"port-down: VF 0000:18:00.2: mlx5_10 port 1 is 1: DOWN / 3: Disabled",
		"[5] DEL through libcni", "host has ibs9f0v0 again; pod holds: lo; records left: 0",
		"[6] A VF whose GUID came up all zeros", "ADD -> error 102: VF 0000:18:00.3",
		"mlx5_11 node GUID is 0000:0000:0000:0000",
		"DEL after the refused ADD returned ibs9f0v1 to the host: true",
		"demo passed: rename repaired, drift caught, clean DEL, zero GUID refused.",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the demo's output lacks %q (in order); output:\n%s", want, out)
		}
		rest = rest[i+len(want):]
	}
}
