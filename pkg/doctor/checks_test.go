package doctor

import (
	"slices"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

// reported lists the checks the rows of steps report.
func reported() []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.reports...)
	}
	return out
}

// The doctor's table and hostconfig's list name registered checks alone,
// and every registered check has a caller: the doctor, or hostconfig
// --check (whose findings the doctor merges with a spec).
func TestStepsRunRegisteredChecks(t *testing.T) {
	callers := slices.Concat(reported(), hostconfig.Checks)
	for _, name := range callers {
		if _, ok := finding.Lookup(name); !ok {
			t.Errorf("check %q is run but not in package finding's registry", name)
		}
	}
	for _, c := range finding.All() {
		if !slices.Contains(callers, c.Name) {
			t.Errorf("registered check %q is run by neither the doctor nor hostconfig --check", c.Name)
		}
	}
}

// Ports runs every port check and nothing else: PortChecks are the checks
// the port rows of the table report, each once.
func TestPortStepsReportPortChecks(t *testing.T) {
	var got []string
	for _, s := range portSteps {
		got = append(got, s.reports...)
	}
	if want := PortChecks; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("the port rows of the doctor's table report %v, want PortChecks %v", got, want)
	}
}
