package doctor

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

func TestNPDSummary(t *testing.T) {
	many := &Report{PFs: 8, VFs: 64}
	for i := range 20 {
		many.Findings = append(many.Findings, Finding{Severity: SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:18:00." + string(rune('0'+i%8))})
	}
	for _, tc := range []struct {
		name string
		rep  *Report
		max  int
		want string
	}{
		{"healthy", &Report{PFs: 8, VFs: 64}, 80, "SR-IOV VFs healthy (8 PFs, 64 VFs)"},
		{"warnings are healthy", &Report{PFs: 1, VFs: 8, Findings: []Finding{{Severity: SeverityWarning, Check: "x", Subject: "y"}}},
			80, "SR-IOV VFs healthy (1 PFs, 8 VFs, 1 warnings)"},
		{"one error", &Report{Findings: []Finding{{Severity: SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:18:00.3"},
			{Severity: SeverityWarning, Check: "w", Subject: "z"}}}, 80, "1 SR-IOV error: " + finding.CheckGUIDInvalid + " 0000:18:00.3"},
		{"a subject named once per check", &Report{Findings: []Finding{
			{Severity: SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:c0:02.1"}, // node GUID
			{Severity: SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:c0:02.1"}, // port GUID
			{Severity: SeverityError, Check: finding.CheckPortState, Subject: "0000:c0:02.1"}}},
			80, "3 SR-IOV errors: " + finding.CheckGUIDInvalid + " 0000:c0:02.1; " + finding.CheckPortState + " 0000:c0:02.1"},
		{"cut to the limit", many, 80, ""},
		{"cut inside a rune", &Report{Findings: []Finding{{Severity: SeverityError, Check: "c", Subject: "ééééééé"}}}, 24, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.rep.NPDSummary(tc.max)
			if len(got) > tc.max || !utf8.ValidString(got) {
				t.Errorf("%q: %d bytes (max %d), valid UTF-8 %v", got, len(got), tc.max, utf8.ValidString(got))
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.want == "" && !strings.HasSuffix(got, "…") {
				t.Errorf("%q: a cut summary ends in …", got)
			}
		})
	}
}
