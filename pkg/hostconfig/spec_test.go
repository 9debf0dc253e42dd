package hostconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

func TestParseSpecDefaults(t *testing.T) {
	got := mustParse(t, "vfs: 8\npfs:\n  - pci: 0000:18:00.0\n")
	pfAlt := DefaultPFAltName
	want := &Spec{
		LinkType: LinkAuto, VFs: 8, VFName: "pf{pfidx}vf{vf}", AltName: "vf-{pci}", PFAltName: &pfAlt,
		GUIDs: GUIDPFDerived, WaitSeconds: 60,
		Before: []string{"kubelet.service"}, PFs: []PFSpec{{PCI: "0000:18:00.0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	ib := mustParse(t, "linkType: infiniband\nvfs: 8\npfs: [{match: {vendor: 15B3, device: '0x1021'}}]\n")
	if ib.VFName != "ib{pfidx}v{vf}" || ib.GUIDs != GUIDPFDerived || *ib.PFs[0].Match != (Match{Vendor: "0x15b3", Device: "0x1021"}) {
		t.Errorf("infiniband defaults: vfName %q guids %q match %+v", ib.VFName, ib.GUIDs, *ib.PFs[0].Match)
	}
	if notes := got.Ignored(); len(notes) != 0 {
		t.Errorf("a spec without deprecated keys: Ignored() = %q", notes)
	}
	// scriptPath named the shell script the unit ran before hostconfig
	// apply: accepted, ignored, and said so.
	old := mustParse(t, "scriptPath: /usr/local/sbin/sriov-stable-vfs\nvfs: 8\npfs:\n  - pci: 0000:18:00.0\n")
	if notes := old.Ignored(); len(notes) != 1 || !strings.HasPrefix(notes[0], "scriptPath is ignored: the unit runs /usr/local/bin/sriov-stable-agent hostconfig apply") {
		t.Errorf("scriptPath: Ignored() = %q", notes)
	}
	eth := mustParse(t, "linkType: ethernet\nvfs: 4\npfName: enp{pfidx}\npfAltName: \"\"\npfs: [{pci: 0000:3B:00.1, vfOffset: 2, vfStride: 1}]\n")
	if eth.GUIDs != GUIDNone || *eth.PFAltName != "" || eth.PFs[0].PCI != "0000:3b:00.1" || *eth.PFs[0].VFOffset != 2 {
		t.Errorf("ethernet spec: guids %q pfAltName %q pci %q", eth.GUIDs, *eth.PFAltName, eth.PFs[0].PCI)
	}
}

// TestParseSpecErrors: every bad spec fails with ErrInvalidSpec and a
// message that names the field and what is wrong.
func TestParseSpecErrors(t *testing.T) {
	const pf = "pfs:\n  - pci: 0000:18:00.0\n"
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "the spec is empty"},
		{"comments only", "# nothing\n", "the spec is empty"},
		{"two documents", "vfs: 8\n" + pf + "---\nvfs: 4\n", "more than one YAML document"},
		{"unknown key", "vfz: 8\n" + pf, "field vfz not found"},
		{"wrong type", "vfs: eight\n" + pf, `vfs: "eight" on line 1 is not a whole number in decimal digits`},
		{"wrong type in a string field", "vfs: 8\nvfName: [a]\n" + pf, "cannot unmarshal !!seq into string"},
		{"link type", "linkType: roce\nvfs: 8\n" + pf, `linkType: "roce" is not one of infiniband, ethernet, auto`},
		{"negative vfs", "vfs: -1\n" + pf, "vfs: -1 is out of range 1..32768"},
		{"too many vfs", "vfs: 40000\n" + pf, "vfs: 40000 is out of range 1..32768"},
		{"guid scheme", "vfs: 8\nguids: random\n" + pf, `guids: "random" is not one of pf-derived, none`},
		{"guids on ethernet", "linkType: ethernet\nguids: pf-derived\nvfs: 8\n" + pf, "guids: pf-derived assigns InfiniBand GUIDs but linkType is ethernet; use guids: none"},
		{"slash in vfName", "vfName: ib/{vf}\nvfs: 8\n" + pf, `vfName: pattern "ib/{vf}" gives "ib/0", which contains '/'`},
		{"long vfName", "vfName: sriov-vf-{pfidx}-{vf}-xyz\nvfs: 8\n" + pf, `gives "sriov-vf-0-0-xyz", longer than 15 bytes`},
		{"kernel-style vfName", "vfName: ib{vf}\nvfs: 8\n" + pf, `vfName: pattern "ib{vf}" gives "ib0", a name the kernel or a runtime assigns on its own`},
		{"vfName net<N>", "vfName: net{vf}\nvfs: 8\n" + pf, `gives "net0", a name the kernel or a runtime assigns`},
		{"vfName placeholder", "vfName: ib{pf}v{vf}\nvfs: 8\n" + pf, "vfName: pattern \"ib{pf}v{vf}\" has unknown placeholder {pf}; use {pfidx} or {vf}"},
		{"vfName unclosed", "vfName: ib{pfidx\nvfs: 8\n" + pf, "has an unclosed '{'"},
		{"pfName with vf", "pfName: ibp{vf}\nvfs: 8\n" + pf, "pfName: pattern \"ibp{vf}\" uses {vf}, which a PF does not have"},
		{"altName whitespace", "altName: vf {pci}\nvfs: 8\n" + pf, "invalid altName: template \"vf {pci}\" gives"},
		{"altName placeholder", "altName: vf-{bus}\nvfs: 8\n" + pf, "unknown placeholder {bus}"},
		{"altName too long", "altName: " + strings.Repeat("x", 120) + "-{pci}\nvfs: 8\n" + pf, "longer than 127 bytes"},
		{"pfAltName with vf", "pfAltName: pf-{vf}\nvfs: 8\n" + pf, `pfAltName: template "pf-{vf}" may only use {pci}`},
		{"pfAltName colon", "pfAltName: \"pf:{pci}\"\nvfs: 8\n" + pf, "invalid pfAltName: template \"pf:{pci}\" gives"},
		{"wait too long", "waitSeconds: 700\nvfs: 8\n" + pf, "waitSeconds: 700 is out of range 1..600"},
		{"wait negative", "waitSeconds: -5\nvfs: 8\n" + pf, "waitSeconds: -5 is out of range 1..600"},
		{"before not a unit", "before: [kubelet]\nvfs: 8\n" + pf, `before: "kubelet" is not a systemd unit name`},
		{"no pfs", "vfs: 8\n", "pfs: no PFs; list them by pci address or with a match rule"},
		{"pci and match", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, match: {vendor: 0x15b3}}\n", "pfs[0]: set either pci or match, not both"},
		{"neither", "vfs: 8\npfs:\n  - vfs: 4\n", "pfs[0]: set pci (e.g. 0000:18:00.0) or match"},
		{"short pci", "vfs: 8\npfs:\n  - pci: \"18:00.0\"\n", `invalid pfs[0].pci: "18:00.0" is not a PCI address of the form dddd:bb:dd.f`},
		{"pci function 8", "vfs: 8\npfs:\n  - pci: 0000:18:00.8\n", "function above 7"},
		{"duplicate pci", "vfs: 8\npfs:\n  - pci: 0000:18:00.0\n  - pci: 0000:18:00.0\n", "pfs[1]: PF 0000:18:00.0 is already listed in pfs[0]"},
		{"vendor name", "vfs: 8\npfs:\n  - match: {vendor: mellanox}\n", `pfs[0].match.vendor: "0xmellanox" is not a 4-digit hex PCI vendor ID`},
		{"device id", "vfs: 8\npfs:\n  - match: {vendor: 0x15b3, device: 0x10210}\n", `pfs[0].match.device: "0x10210" is not a 4-digit hex PCI device ID`},
		{"offset on a match", "vfs: 8\npfs:\n  - {match: {vendor: 0x15b3}, vfOffset: 2, vfStride: 1}\n", "pfs[0]: vfOffset and vfStride belong to one PF"},
		{"no vf count", "pfs:\n  - pci: 0000:18:00.0\n", "pfs[0]: no VF count; set vfs at the top or in the entry"},
		{"entry vfs negative", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, vfs: -2}\n", "pfs[0].vfs: -2 is out of range"},
		{"offset without stride", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, vfOffset: 2}\n", "pfs[0]: set vfOffset and vfStride together"},
		{"offset zero", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, vfOffset: 0, vfStride: 1}\n", "pfs[0].vfOffset: 0 is out of range 1..65535"},
		{"entry link type", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, linkType: IB}\n", `pfs[0].linkType: "IB" is not one of infiniband, ethernet, auto`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("ParseSpec accepted:\n%s", tc.yaml)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("error %v does not wrap ErrInvalidSpec", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %v\nlacks\n  %s", err, tc.want)
			}
		})
	}
}

// TestParseSpecIntegers: every integer field takes decimal digits only.
// yaml.v3 alone reads 8.9 as 8, 8_0 as 80, 010 as 8 and 0x10 as 16; each
// such form must be an error naming the field and its line.
func TestParseSpecIntegers(t *testing.T) {
	const spec = "linkType: infiniband\nvfs: %s\nwaitSeconds: %s\npfs:\n  - pci: 0000:18:00.0\n" +
		"    vfs: %s\n    vfOffset: %s\n    vfStride: %s\n"
	fields := []struct {
		name string
		line int
		get  func(*Spec) int
	}{
		{"vfs", 2, func(s *Spec) int { return s.VFs }},
		{"waitSeconds", 3, func(s *Spec) int { return s.WaitSeconds }},
		{"pfs[0].vfs", 6, func(s *Spec) int { return s.PFs[0].VFs }},
		{"pfs[0].vfOffset", 7, func(s *Spec) int { return *s.PFs[0].VFOffset }},
		{"pfs[0].vfStride", 8, func(s *Spec) int { return *s.PFs[0].VFStride }},
	}
	render := func(field, value string) string {
		v := map[string]string{"vfs": "8", "waitSeconds": "30", "pfs[0].vfs": "4", "pfs[0].vfOffset": "2", "pfs[0].vfStride": "1"}
		v[field] = value
		return fmt.Sprintf(spec, v["vfs"], v["waitSeconds"], v["pfs[0].vfs"], v["pfs[0].vfOffset"], v["pfs[0].vfStride"])
	}
	bad := []string{"8.9", "2.7", "1.99", "8.0", "1e1", "8_0", "1_000", "0x10", "010", "0o10", "0b11", `"8"`, "'8'", ".inf",
		"true", "eight", "99999999999999999999", "[8]", "{n: 8}"}
	for _, f := range fields {
		for _, value := range bad {
			t.Run(f.name+"="+value, func(t *testing.T) {
				in := render(f.name, value)
				_, err := ParseSpec([]byte(in))
				if !errors.Is(err, ErrInvalidSpec) {
					t.Fatalf("ParseSpec = %v, want ErrInvalidSpec:\n%s", err, in)
				}
				want := fmt.Sprintf("line %d", f.line)
				if !strings.Contains(err.Error(), "invalid hostconfig spec: "+f.name+": ") || !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s and %s", err, f.name, want)
				}
			})
		}
		for value, want := range map[string]int{"16": 16, "+16": 16, "5": 5} {
			t.Run(f.name+"="+value, func(t *testing.T) {
				s, err := ParseSpec([]byte(render(f.name, value)))
				if err != nil {
					t.Fatalf("ParseSpec: %v", err)
				}
				if got := f.get(s); got != want {
					t.Errorf("%s = %d, want %d", f.name, got, want)
				}
			})
		}
	}
	// Unset (null) keeps the default; a negative number reaches the range
	// check, which names the field.
	if s, err := ParseSpec([]byte("vfs: 8\nwaitSeconds: ~\npfs: [{pci: 0000:18:00.0, vfs: }]\n")); err != nil || s.WaitSeconds != DefaultWaitSeconds {
		t.Errorf("null waitSeconds: %+v, %v; want the default", s, err)
	}
	if _, err := ParseSpec([]byte(render("pfs[0].vfStride", "-1"))); err == nil || !strings.Contains(err.Error(), "pfs[0].vfStride: -1 is out of range") {
		t.Errorf("negative vfStride: %v", err)
	}
	// Through an anchor and a merge key, the field is still checked.
	merged := "base: &b {vfs: 8.9}\n"
	if _, err := ParseSpec([]byte(merged + "vfs: 8\npfs:\n  - <<: *b\n    pci: 0000:18:00.0\n")); err == nil ||
		!strings.Contains(err.Error(), `pfs[0].vfs: "8.9" on line 1`) {
		t.Errorf("a merged 8.9: %v", err)
	}
}

func TestReadSpec(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("vfs: 8\npfs: [{pci: 0000:18:00.0}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("vfs: 8\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if spec, err := ReadSpec(good); err != nil || spec.VFs != 8 {
		t.Errorf("ReadSpec(good) = %+v, %v", spec, err)
	}
	if _, err := ReadSpec(bad); !errors.Is(err, ErrInvalidSpec) || !strings.HasPrefix(err.Error(), bad+": invalid hostconfig spec") {
		t.Errorf("ReadSpec(bad) = %v; want ErrInvalidSpec, prefixed with the path", err)
	}
	if _, err := ReadSpec(filepath.Join(dir, "none.yaml")); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "read hostconfig spec: open ") {
		t.Errorf("ReadSpec(missing) = %v; want fs.ErrNotExist, saying what was read", err)
	}
}

// TestReadSpecHostile: a spec given through a link (as a ConfigMap mount
// gives it) is read; a FIFO, a link to /dev/zero or 100 MB of junk given as
// the spec is an error naming it, at once.
func TestReadSpecHostile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("vfs: 8\npfs: [{pci: 0000:18:00.0}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "node.yaml")
	safefiletest.Symlink(t, good, link)
	if spec, err := ReadSpec(link); err != nil || spec.VFs != 8 {
		t.Errorf("ReadSpec(link to a good spec) = %+v, %v", spec, err)
	}
	fifo, zero, junk := filepath.Join(dir, "fifo.yaml"), filepath.Join(dir, "zero.yaml"), filepath.Join(dir, "junk.yaml")
	safefiletest.FIFO(t, fifo)
	safefiletest.Symlink(t, "/dev/zero", zero)
	safefiletest.Sparse(t, junk, 100<<20)
	for path, says := range map[string]string{
		fifo: fifo + " is a FIFO, not a regular file",
		zero: zero + " is a symbolic link to /dev/zero, a character device, not a regular file",
		junk: junk + " is larger than 1 MiB",
	} {
		var err error
		safefiletest.Within(t, safefiletest.Prompt, "ReadSpec", func() { _, err = ReadSpec(path) })
		if err == nil || err.Error() != "read hostconfig spec: "+says {
			t.Errorf("ReadSpec(%s) = %v; want %q", filepath.Base(path), err, says)
		}
	}
}
