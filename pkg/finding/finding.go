// Package finding is the one model of what the agent's node checks report:
// a finding names its check, its subject, how severe it is, what was found
// and what to do about it; and the registry of those checks, each declared
// once with what it reads and the device taint its errors call for. The
// doctor and hostconfig --check are its two callers, so the agent's
// metrics, the node condition and the device taints read one model.
package finding

import (
	"fmt"
	"slices"
	"sort"
)

// Severity grades a finding: errors break attachments, warnings are risks
// or degraded setups, info says what could not be checked.
type Severity string

// Severities, most severe first.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
	Info    Severity = "info"
)

// Severities lists every severity, most severe first.
var Severities = []Severity{Error, Warning, Info}

// Rank orders severities: 0 for the most severe.
func (s Severity) Rank() int {
	switch s {
	case Error:
		return 0
	case Warning:
		return 1
	}
	return 2
}

// Finding is one result of a check about one subject.
type Finding struct {
	Severity Severity `json:"severity"`
	Check    string   `json:"check"` // a registered check's name (Lookup)
	// Subject is the bare PCI address of the function a finding is about
	// (0000:18:00.2). Findings about no one function say what else they are
	// about: "node" (devices, hostconfig-spec, and the notes of vf-altname
	// and vf-leftover), a kernel module (driver-loaded,
	// driver-kernel-mismatch, and driver-probe without an address), the
	// kernel log's path (kernel-log), a PCI device ID (firmware-version's
	// info about a device with no known minimum).
	Subject string `json:"subject"`
	Message string `json:"message"`
	Remedy  string `json:"remedy,omitempty"`
	// Covers lists the functions a finding about a PF's port makes
	// unusable with it, its VFs (a VF's port follows its PF's), by PCI
	// address; empty for every other finding. The device taints read it.
	Covers []string `json:"covers,omitempty"`
}

// Equal reports whether two findings say the same thing.
func (f Finding) Equal(g Finding) bool {
	return f.Severity == g.Severity && f.Check == g.Check && f.Subject == g.Subject && f.Message == g.Message &&
		f.Remedy == g.Remedy && slices.Equal(f.Covers, g.Covers)
}

// String formats a finding for people: severity, subject, message, and
// the remedy on a second line.
func (f Finding) String() string {
	s := fmt.Sprintf("%-7s %s: %s", f.Severity, f.Subject, f.Message)
	if f.Remedy != "" {
		s += "\n        fix: " + f.Remedy
	}
	return s
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == Error {
			return true
		}
	}
	return false
}

// SortBySeverity orders findings most severe first, keeping the order of
// findings of one severity.
func SortBySeverity(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity.Rank() < fs[j].Severity.Rank() })
}

// Sort orders findings most severe first, then by check and subject.
func Sort(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() < b.Severity.Rank()
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Subject < b.Subject
	})
}
