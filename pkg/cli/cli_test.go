package cli

import (
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		output string
	}{
		{nil, 2, "sriov-stable-cni install ..."},
		{[]string{"version"}, 0, "CNI versions: "},
		{[]string{"help"}, 0, `"sriov-stable-agent doctor"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.output) {
			t.Errorf("sriov-stable-cni %v: exit %d, want %d with %q in:\n%s%s", tc.args, code, tc.code, tc.output, out, errOut)
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
