package crashpoint_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestKillingHitOnlyWithTag: the file that can kill is compiled only with
// the crashpoints tag; every other build gets the empty Hit. (The crash
// test checks make build's binary for the hook itself.)
func TestKillingHitOnlyWithTag(t *testing.T) {
	for _, c := range []struct {
		tags string
		want []string
	}{
		{"", []string{"crashpoint.go", "nohit.go"}},
		{"crashpoints", []string{"crashpoint.go", "hit.go"}},
	} {
		out, err := exec.Command("go", "list", "-tags", c.tags, "-f", "{{join .GoFiles \" \"}}", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -tags %q: %v\n%s", c.tags, err, out)
		}
		if got := strings.Fields(string(out)); !slices.Equal(got, c.want) {
			t.Errorf("go list -tags %q: files %v, want %v", c.tags, got, c.want)
		}
	}
}
