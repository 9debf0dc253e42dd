package finding

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The registry: each name once, in the form the metric labels and the
// docs use, with a line saying what it checks and what it reads; Lookup
// finds each and nothing else.
func TestRegistry(t *testing.T) {
	nameRE := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, c := range All() {
		if !nameRE.MatchString(c.Name) {
			t.Errorf("check name %q is not lowercase words joined by hyphens", c.Name)
		}
		if seen[c.Name] {
			t.Errorf("check %q is registered twice", c.Name)
		}
		seen[c.Name] = true
		if c.Doc == "" || strings.Contains(c.Doc, "\n") {
			t.Errorf("check %q: doc %q is not one line", c.Name, c.Doc)
		}
		if c.Needs == 0 || c.Needs.String() == "" {
			t.Errorf("check %q says nothing of what it reads", c.Name)
		}
		if got, ok := Lookup(c.Name); !ok || got.Name != c.Name || got.DeviceTaint != c.DeviceTaint {
			t.Errorf("Lookup(%q) = %+v, %v", c.Name, got, ok)
		}
		if tt := c.DeviceTaint; tt != nil && (tt.Key == "" || tt.Value == "") {
			t.Errorf("check %q: device taint %+v lacks a key or value", c.Name, *tt)
		}
	}
	if _, ok := Lookup("no-such-check"); ok {
		t.Error("Lookup finds an unregistered check")
	}
	if got, want := (NeedSysfs | NeedKernelLog | NeedStateDir).String(), "sysfs, kernel log, state dir"; got != want {
		t.Errorf("Needs.String() = %q, want %q", got, want)
	}
	if !(NeedSysfs | NeedLinks).Has(NeedLinks) || NeedSysfs.Has(NeedSysfs|NeedLinks) {
		t.Error("Needs.Has does not say whether every input is held")
	}
}

// Every registered check is explained where operators look them up,
// docs/doctor.md (the doctor's table, and the paragraph on the spec's).
func TestRegistryDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/doctor.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range All() {
		if !strings.Contains(string(doc), "`"+c.Name+"`") {
			t.Errorf("docs/doctor.md does not explain check %s (%s)", c.Name, c.Doc)
		}
	}
}
