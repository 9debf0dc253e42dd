package hostconfig

import (
	"strings"
	"testing"
)

func TestRenderName(t *testing.T) {
	cases := []struct {
		pattern   string
		pfidx, vf int
		want, err string
	}{
		{"ib{pfidx}v{vf}", 7, 63, "ib7v63", ""},
		{"pf{pfidx}vf{vf}", 0, 0, "pf0vf0", ""},
		{"ibp{pfidx}", 3, -1, "ibp3", ""},
		{"ethx{vf}", 0, 2, "ethx2", ""},     // a letter after the prefix: not the kernel's
		{"ib-{vf}", 0, 2, "ib-2", ""},       // likewise
		{"ib{pfidx}{vf}", 1, 0, "", "ib10"}, // kernel-style, and ambiguous
		{"eth{vf}", 0, 1, "", `gives "eth1", a name the kernel or a runtime assigns`},
		{"wlan{vf}", 0, 1, "", `gives "wlan1"`},
		{"dev{vf}", 0, 12, "", `gives "dev12"`},
		{"net{vf}", 0, 1, "", `gives "net1"`},
		{"ib{pfidx}", 0, -1, "", `gives "ib0"`},
		{"ib{vf}", 0, -1, "", "uses {vf}, which a PF does not have"},
		{"vf {vf}", 0, 1, "", "whitespace"},
		{"{pfidx}:{vf}", 0, 1, "", "contains '/', ':'"},
		{"ib{pfidx}v{vf}{", 0, 1, "", "unclosed '{'"},
		{"ib{PFIDX}", 0, 1, "", "unknown placeholder {PFIDX}"},
	}
	for _, tc := range cases {
		got, err := renderName("vfName", tc.pattern, tc.pfidx, tc.vf)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("renderName(%q, %d, %d) = %q, %v; want %q", tc.pattern, tc.pfidx, tc.vf, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("renderName(%q, %d, %d) = %q, %v; want error with %q", tc.pattern, tc.pfidx, tc.vf, got, err, tc.err)
		}
	}
}
