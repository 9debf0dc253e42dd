package config

import (
	"strings"
	"testing"
)

func TestRenderAltName(t *testing.T) {
	const vf, pf = "0000:18:00.2", "0000:18:00.0"
	tests := []struct {
		name, tmpl, vf, pf string
		index              int
		want               string // "" = error
	}{
		{"default", DefaultAltName, vf, pf, 0, "vf-0000-18-00.2"},
		{"pci only, no PF needed", "{pci}", vf, "", -1, "0000-18-00.2"},
		{"pf and vf", "{pf}v{vf}", vf, pf, 3, "0000-18-00.0v3"},
		{"all three", "{pf}_{vf}_{pci}", vf, pf, 15, "0000-18-00.0_15_0000-18-00.2"},
		{"placeholder twice", "{vf}-{vf}", vf, pf, 7, "7-7"},
		{"literal only", "ib-compute", vf, pf, 0, "ib-compute"},
		{"closing brace is literal", "vf}{vf}", vf, pf, 1, "vf}1"},
		{"vf index 0", "v{vf}", vf, pf, 0, "v0"},
		{"vf index large", "v{vf}", vf, pf, 65535, "v65535"},
		{"exactly 127 bytes", strings.Repeat("a", 115) + "{pci}", vf, pf, 0, strings.Repeat("a", 115) + "0000-18-00.2"},

		{"{pf} without PF", "{pf}", vf, "", -1, ""},
		{"{vf} without index", "{vf}", vf, "", -1, ""},
		{"unknown placeholder", "{netdev}", vf, pf, 0, ""},
		{"empty placeholder", "a{}", vf, pf, 0, ""},
		{"nested brace", "{p{ci}}", vf, pf, 0, ""},
		{"unclosed", "vf-{pci", vf, pf, 0, ""},
		{"unclosed at end", "vf-{", vf, pf, 0, ""},
		{"128 bytes", strings.Repeat("a", 116) + "{pci}", vf, pf, 0, ""},
		{"slash", "a/{vf}", vf, pf, 0, ""},
		{"colon", "a:{vf}", vf, pf, 0, ""},
		{"space", "a {vf}", vf, pf, 0, ""},
		{"empty", "", vf, pf, 0, ""},
		{"dotdot", "..", vf, pf, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RenderAltName(tc.tmpl, tc.vf, tc.pf, tc.index)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("RenderAltName(%q) = %q, want an error", tc.tmpl, got)
				}
				if f := fieldOf(t, err); f != "altName" {
					t.Errorf("error names field %q, want altName", f)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("RenderAltName(%q) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
			}
		})
	}
}

// nameCases are shared by ValidateIfName and ValidateAltName; maxOK says
// up to which limit the name is acceptable (0 = never).
var nameCases = []struct {
	name, in string
	maxOK    int
}{
	{"short", "net1", 127},
	{"dots and dashes", "eth0.100-a_b", 127},
	{"15 bytes", strings.Repeat("n", 15), 127},
	{"16 bytes", strings.Repeat("n", 16), 127},
	{"127 bytes", strings.Repeat("n", 127), 127},
	{"128 bytes", strings.Repeat("n", 128), 0},
	// Non-ASCII is refused: the kernel's isspace() treats byte 0xa0 (in "à")
	// as whitespace, and systemd.link names are ASCII.
	{"two-byte runes", strings.Repeat("é", 7), 0},
	{"a0 byte inside UTF-8", "\u00e0", 0},
	{"leading dot", ".net1", 127},
	{"percent and at", "a%b@c", 127},
	{"empty", "", 0},
	{"dot", ".", 0},
	{"dotdot", "..", 0},
	{"slash", "a/b", 0},
	{"colon", "a:b", 0},
	{"space", "a b", 0},
	{"leading space", " a", 0},
	{"tab", "a\tb", 0},
	{"newline", "a\n", 0},
	{"carriage return", "a\rb", 0},
	{"vertical tab", "a\vb", 0},
	{"form feed", "a\fb", 0},
	{"NUL", "a\x00b", 0},
	{"control 0x01", "a\x01b", 0},
	{"DEL", "a\x7fb", 0},
	{"NEL U+0085", "a\u0085b", 0},
	{"NBSP U+00A0", "a\u00a0b", 0},
	{"line separator U+2028", "a\u2028b", 0},
	{"paragraph separator U+2029", "a\u2029b", 0},
	// The rest of Unicode's White_Space set (what unicode.IsSpace and
	// libcni's ValidateInterfaceName reject).
	{"ogham space U+1680", "a\u1680b", 0},
	{"en quad U+2000", "a\u2000b", 0},
	{"em space U+2003", "a\u2003b", 0},
	{"hair space U+200A", "a\u200ab", 0},
	{"narrow NBSP U+202F", "a\u202fb", 0},
	{"math space U+205F", "a\u205fb", 0},
	{"ideographic space U+3000", "a\u3000b", 0},
}

func TestValidateAltName(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateAltName(tc.in)
			if want := tc.maxOK > 0 && len(tc.in) <= tc.maxOK; (err == nil) != want {
				t.Errorf("ValidateAltName(%q) = %v, want ok=%v", truncate(tc.in, 20), err, want)
			}
		})
	}
}

func TestValidateIfName(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateIfName(tc.in)
			if want := tc.maxOK > 0 && len(tc.in) <= MaxIfNameLen; (err == nil) != want {
				t.Errorf("ValidateIfName(%q) = %v, want ok=%v", truncate(tc.in, 20), err, want)
			}
		})
	}
}

func TestValidateAltNameTemplateUsesWidestExpansion(t *testing.T) {
	// {vf} is checked at its widest (five digits), so 24 of them (120
	// bytes) pass and 26 (130 bytes) do not, whatever index the VF has.
	if err := ValidateAltNameTemplate(strings.Repeat("{vf}", 24)); err != nil {
		t.Errorf("24 × {vf}: %v", err)
	}
	if err := ValidateAltNameTemplate(strings.Repeat("{vf}", 26)); err == nil {
		t.Error("26 × {vf} accepted; its expansion can reach 130 bytes")
	}
	// {pf} is as wide as any PCI address.
	if err := ValidateAltNameTemplate(strings.Repeat("a", 115) + "{pf}"); err != nil {
		t.Errorf("115 bytes + {pf}: %v", err)
	}
	if err := ValidateAltNameTemplate(strings.Repeat("a", 116) + "{pf}"); err == nil {
		t.Error("116 bytes + {pf} accepted; its expansion is 128 bytes")
	}
}

func TestPCIToName(t *testing.T) {
	if got := PCIToName("0000:18:00.2"); got != "0000-18-00.2" {
		t.Errorf("PCIToName = %q, want 0000-18-00.2", got)
	}
}
