package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

// mainMode makes the test binary run main(), as the real binary: tests exec
// it to drive the CLI through a real process, and the installer execs its
// installed copy with CNI_COMMAND=VERSION, which answers through the real
// skel with the plugin's versions.
const mainMode = "SRIOV_CNI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv("CNI_COMMAND") != "" || os.Getenv(mainMode) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		output string
	}{
		{nil, 2, "sriov-stable-cni install ..."},
		{[]string{"help"}, 0, `"sriov-stable-agent doctor"`},
		{[]string{"--help"}, 0, "sriov-stable-cni version "},
		{[]string{"version"}, 0, "CNI versions: " + strings.Join(plugin.Versions.SupportedVersions(), ", ")},
		{[]string{"--version"}, 0, "commit: "},
		{[]string{"-v"}, 0, "commit: "},
		{[]string{"version", "--help"}, 0, "usage: sriov-stable-cni version"},
		{[]string{"version", "extra"}, 2, `sriov-stable-cni version: unexpected argument "extra"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.output) {
			t.Errorf("sriov-stable-cni %v: exit %d, want %d with %q in:\n%s%s", tc.args, code, tc.code, tc.output, out, errOut)
		}
		if code == 0 && errOut != "" || code != 0 && out != "" {
			t.Errorf("sriov-stable-cni %v: exit %d with stdout %q, stderr %q: output belongs on stdout, errors on stderr", tc.args, code, out, errOut)
		}
	}
}

// The node commands moved to sriov-stable-agent: naming one gets exit 2 and
// one line on stderr saying where it went and why, not the usage text.
func TestMovedCommands(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--expect-vfs", "8", "--link-layer", "infiniband"},
		{"hostconfig", "--spec", "node.yaml", "--check"},
	} {
		code, out, errOut := runCLI(args...)
		want := `moved to sriov-stable-agent: run "sriov-stable-agent ` + args[0] + `"`
		if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) ||
			!strings.Contains(errOut, "every pod attach") {
			t.Errorf("sriov-stable-cni %v: exit %d, stdout %q, stderr %q; want 2, nothing on stdout and one line with %q and why",
				args, code, out, errOut, want)
		}
	}
	if _, out, _ := runCLI("help"); strings.Contains(out, "sriov-stable-cni doctor") || strings.Contains(out, "sriov-stable-cni hostconfig") {
		t.Errorf("the usage still offers the moved commands:\n%s", out)
	}
}

// The command lines the installer DaemonSet and the Dockerfile give this
// binary are ones it accepts: each with --help appended (which stops after
// parsing the rest) exits 0, and the liveness probe's runs.
func TestDeployCommandLines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "daemonset", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	var lines [][]string
	for _, c := range slices.Concat(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers) {
		if cmd := slices.Concat(c.Command, c.Args); len(cmd) > 0 && cmd[0] == "/usr/bin/sriov-stable-cni" {
			lines = append(lines, append(cmd[1:], "--help"))
		}
		if p := c.LivenessProbe; p != nil && p.Exec != nil && strings.HasSuffix(p.Exec.Command[0], "/sriov-stable-cni") {
			lines = append(lines, p.Exec.Command[1:])
		}
	}
	lines = append(lines, append(dockerfileCommand(t), "--help"))
	if len(lines) < 4 {
		t.Fatalf("found only %d command lines of this binary in the DaemonSet and the Dockerfile: %q", len(lines), lines)
	}
	for _, args := range lines {
		if code, out, errOut := runCLI(args...); code != 0 {
			t.Errorf("sriov-stable-cni %q: exit %d:\n%s%s", args, code, out, errOut)
		}
	}
}

// dockerfileCommand returns the Dockerfile's ENTRYPOINT and CMD (exec form)
// without the binary's path.
func dockerfileCommand(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entrypoint, cmd []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for prefix, dst := range map[string]*[]string{"ENTRYPOINT ": &entrypoint, "CMD ": &cmd} {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				if err := json.Unmarshal([]byte(v), dst); err != nil {
					t.Fatalf("Dockerfile %s: %v", sc.Text(), err)
				}
			}
		}
	}
	if len(entrypoint) == 0 || entrypoint[0] != "/usr/bin/sriov-stable-cni" {
		t.Fatalf("Dockerfile ENTRYPOINT %q does not run /usr/bin/sriov-stable-cni", entrypoint)
	}
	return slices.Concat(entrypoint[1:], cmd)
}
