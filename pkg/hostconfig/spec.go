// Package hostconfig prepares an SR-IOV node before kubelet starts: from one
// small YAML spec it generates systemd .link files (stable VF names and
// altnames) and a oneshot unit, applies the spec at boot (create VFs, assign
// fabric-unique InfiniBand GUIDs, name what udev did not, verify), and checks
// a node's sysfs against the same spec.
package hostconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// LinkType is the link layer a PF's ports are expected to run.
type LinkType string

// Link types accepted by linkType. Auto decides per PF at boot from the
// port's link_layer and expects nothing in Check.
const (
	LinkInfiniBand LinkType = "infiniband"
	LinkEthernet   LinkType = "ethernet"
	LinkAuto       LinkType = "auto"
)

// GUIDScheme says how VF GUIDs are assigned on InfiniBand PFs.
type GUIDScheme string

// GUID schemes accepted by guids. PFDerived derives each VF's node and port
// GUID from its PF's burned-in GUID (see DeriveVFGUIDs); None leaves GUIDs to
// someone else (a subnet manager, ib-kubernetes).
const (
	GUIDPFDerived GUIDScheme = "pf-derived"
	GUIDNone      GUIDScheme = "none"
)

// Defaults applied by ParseSpec.
const (
	DefaultPFAltName   = "pf-{pci}"
	DefaultWaitSeconds = 60
	MaxWaitSeconds     = 600
	DefaultBefore      = "kubelet.service"
	// MaxVFs is the most VFs per PF the GUID scheme can number (15 bits).
	MaxVFs = 1 << 15
)

// DefaultVFName returns the Name= pattern used when the spec sets none.
func DefaultVFName(lt LinkType) string {
	if lt == LinkInfiniBand {
		return "ib{pfidx}v{vf}"
	}
	return "pf{pfidx}vf{vf}"
}

// Spec is a node's host configuration as written in node.yaml. ParseSpec
// fills in the defaults, so after it every field is set except PFName
// (empty keeps the kernel's PF names) and PFAltName (empty: no PF altname).
type Spec struct {
	// LinkType is the default for every PF: infiniband, ethernet or auto.
	LinkType LinkType `yaml:"linkType"`
	// VFs is the default number of VFs per PF.
	VFs int `yaml:"vfs"`
	// VFName is the Name= pattern for VFs: {pfidx} (the PF's position among
	// the spec's PFs sorted by PCI address) and {vf} (the VF index).
	VFName string `yaml:"vfName"`
	// AltName is the VF AlternativeName= template, the plugin's altName:
	// {pci}, {pf}, {vf}. Default config.DefaultAltName.
	AltName string `yaml:"altName"`
	// PFName is an optional Name= pattern for PFs ({pfidx}).
	PFName string `yaml:"pfName"`
	// PFAltName is the PF AlternativeName= template ({pci}); nil means
	// DefaultPFAltName, "" none.
	PFAltName *string `yaml:"pfAltName"`
	// GUIDs is the GUID scheme; default pf-derived unless linkType is ethernet.
	GUIDs GUIDScheme `yaml:"guids"`
	// WaitSeconds bounds each wait of Apply (the boot unit).
	WaitSeconds int `yaml:"waitSeconds"`
	// ScriptPath is accepted and ignored: the unit ran a generated shell
	// script there until it ran `sriov-stable-agent hostconfig apply`.
	//
	// Deprecated: drop it from the spec; Ignored says so.
	ScriptPath string `yaml:"scriptPath"`
	// Before lists the units the oneshot unit must finish before.
	Before []string `yaml:"before"`
	// PFs selects the physical functions; the first entry that selects a
	// PF decides its settings.
	PFs []PFSpec `yaml:"pfs"`
}

// PFSpec selects PFs by PCI address or by a match rule.
type PFSpec struct {
	PCI   string `yaml:"pci"`
	Match *Match `yaml:"match"`
	// VFs overrides Spec.VFs for this entry.
	VFs int `yaml:"vfs"`
	// LinkType overrides Spec.LinkType for this entry.
	LinkType LinkType `yaml:"linkType"`
	// VFOffset and VFStride are the PF's SR-IOV First VF Offset and VF
	// Stride (sysfs sriov_offset, sriov_stride); with them the VF addresses
	// are known without reading the node's sysfs.
	VFOffset *int `yaml:"vfOffset"`
	VFStride *int `yaml:"vfStride"`
}

// Match selects every SR-IOV capable PF (a PCI function with
// sriov_totalvfs > 0 and no physfn) with the given IDs.
type Match struct {
	Vendor string `yaml:"vendor"`           // e.g. 0x15b3 (Mellanox/NVIDIA)
	Device string `yaml:"device,omitempty"` // e.g. 0x1021 (ConnectX-7); empty matches any
}

// String describes the rule for messages: "vendor 0x15b3 device 0x1021".
func (m Match) String() string {
	if m.Device == "" {
		return "vendor " + m.Vendor
	}
	return "vendor " + m.Vendor + " device " + m.Device
}

// ErrInvalidSpec is wrapped by every validation error of ParseSpec.
var ErrInvalidSpec = errors.New("invalid hostconfig spec")

// ParseSpec decodes node.yaml strictly (unknown keys are errors), applies
// the defaults and validates every field. It does no I/O.
func ParseSpec(data []byte) (*Spec, error) {
	if err := checkIntegers(data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the spec is empty; it needs at least pfs and vfs", ErrInvalidSpec)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document; a spec describes one node", ErrInvalidSpec)
	}
	s.applyDefaults()
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return &s, nil
}

// decimal is how the spec writes a whole number.
var decimal = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// checkIntegers reads every integer field of the spec (vfs, waitSeconds,
// pfs[i].vfs, vfOffset, vfStride: any int field of Spec and PFSpec) as
// written and accepts only decimal digits. yaml.v3 would take 8.9 as 8,
// 8_0 as 80, 010 as 8 (YAML 1.1's octal) and 0x10 as 16 without a word;
// a number the author did not mean must be an error naming the field and
// the line. Other mistakes (unknown keys, wrong kinds) are left to the
// strict decode after it.
func checkIntegers(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil // the strict decode says what is wrong
	}
	return checkIntegersIn(doc.Content[0], reflect.TypeFor[Spec](), "")
}

// checkIntegersIn walks node as the YAML of a value of type t; field is
// its path in the spec ("pfs[1].vfOffset", "" for the whole spec).
func checkIntegersIn(node *yaml.Node, t reflect.Type, field string) error {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && node.Kind == yaml.SequenceNode:
		for i, item := range node.Content {
			if err := checkIntegersIn(item, t.Elem(), fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && node.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, value := node.Content[i].Value, node.Content[i+1]
			if key == "<<" { // a merge key: its mapping's fields are this one's
				if err := checkIntegersIn(value, t, field); err != nil {
					return err
				}
				continue
			}
			for j := range t.NumField() {
				f := t.Field(j)
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
					if err := checkIntegersIn(value, f.Type, strings.TrimPrefix(field+"."+key, ".")); err != nil {
						return err
					}
				}
			}
		}
	case t.Kind() == reflect.Int && node.Kind == yaml.ScalarNode && node.ShortTag() != "!!null":
		if !decimal.MatchString(node.Value) || node.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
			return fmt.Errorf("%s: %q on line %d is not a whole number in decimal digits (such as 8)", field, node.Value, node.Line)
		}
		if _, err := strconv.Atoi(node.Value); err != nil {
			return fmt.Errorf("%s: %s on line %d is too large", field, node.Value, node.Line)
		}
	case t.Kind() == reflect.Int:
		if node.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: line %d holds a list or a mapping, not a whole number", field, node.Line)
		}
	}
	return nil
}

// MaxSpecSize caps the read of a spec: a DGX node's is about 1 KiB.
const MaxSpecSize = 1 << 20

// ReadSpec reads node.yaml from path and parses it with ParseSpec. The path
// may be a link (a ConfigMap mount makes it one), but what it leads to must
// be a regular file of at most MaxSpecSize: a FIFO or /dev/zero given as the
// spec is an error naming it, not a hang (package safefile).
func ReadSpec(path string) (*Spec, error) {
	data, err := safefile.ReadFileFollow(path, MaxSpecSize)
	if err != nil {
		return nil, fmt.Errorf("read hostconfig spec: %w", err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

func (s *Spec) applyDefaults() {
	if s.LinkType == "" {
		s.LinkType = LinkAuto
	}
	if s.VFName == "" {
		s.VFName = DefaultVFName(s.LinkType)
	}
	if s.AltName == "" {
		s.AltName = config.DefaultAltName
	}
	if s.PFAltName == nil {
		def := DefaultPFAltName
		s.PFAltName = &def
	}
	if s.GUIDs == "" {
		s.GUIDs = GUIDPFDerived
		if s.LinkType == LinkEthernet {
			s.GUIDs = GUIDNone
		}
	}
	if s.WaitSeconds == 0 {
		s.WaitSeconds = DefaultWaitSeconds
	}
	if len(s.Before) == 0 {
		s.Before = []string{DefaultBefore}
	}
	for i := range s.PFs {
		pf := &s.PFs[i]
		if pf.PCI != "" {
			pf.PCI = strings.ToLower(strings.TrimSpace(pf.PCI))
		}
		if pf.Match != nil {
			pf.Match.Vendor = normalizeID(pf.Match.Vendor)
			pf.Match.Device = normalizeID(pf.Match.Device)
		}
	}
}

// Ignored lists the keys of the spec that are accepted but have no effect
// any more, each with what to do about it, for the commands to warn about.
func (s *Spec) Ignored() []string {
	if s.ScriptPath == "" {
		return nil
	}
	return []string{"scriptPath is ignored: the unit runs " + AgentPath + " hostconfig apply, not a script; drop the key"}
}

// normalizeID writes a PCI ID as sysfs does: 0x and four lower-case digits.
func normalizeID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if id == "" {
		return ""
	}
	return "0x" + strings.TrimPrefix(id, "0x")
}

func (s *Spec) validate() error {
	if err := validLinkType("linkType", s.LinkType); err != nil {
		return err
	}
	if s.VFs < 0 || s.VFs > MaxVFs {
		return fmt.Errorf("vfs: %d is out of range 1..%d", s.VFs, MaxVFs)
	}
	switch s.GUIDs {
	case GUIDPFDerived:
		if s.LinkType == LinkEthernet {
			return fmt.Errorf("guids: %s assigns InfiniBand GUIDs but linkType is ethernet; use guids: none", s.GUIDs)
		}
	case GUIDNone:
	default:
		return fmt.Errorf("guids: %q is not one of %s, %s", s.GUIDs, GUIDPFDerived, GUIDNone)
	}
	if err := validNamePattern("vfName", s.VFName, true); err != nil {
		return err
	}
	if s.PFName != "" {
		if err := validNamePattern("pfName", s.PFName, false); err != nil {
			return err
		}
	}
	if err := config.ValidateAltNameTemplate(s.AltName); err != nil {
		return err
	}
	if *s.PFAltName != "" {
		if strings.Contains(*s.PFAltName, "{pf}") || strings.Contains(*s.PFAltName, "{vf}") {
			return fmt.Errorf("pfAltName: template %q may only use {pci} (a PF has no PF and no VF index)", *s.PFAltName)
		}
		if err := config.ValidateAltNameTemplate(*s.PFAltName); err != nil {
			return renameField(err, "pfAltName")
		}
	}
	if s.WaitSeconds < 1 || s.WaitSeconds > MaxWaitSeconds {
		return fmt.Errorf("waitSeconds: %d is out of range 1..%d", s.WaitSeconds, MaxWaitSeconds)
	}
	for _, u := range s.Before {
		if !validUnitName(u) {
			return fmt.Errorf("before: %q is not a systemd unit name such as kubelet.service", u)
		}
	}
	if len(s.PFs) == 0 {
		return fmt.Errorf("pfs: no PFs; list them by pci address or with a match rule")
	}
	seen := map[string]int{}
	for i, pf := range s.PFs {
		if err := s.validatePF(i, pf); err != nil {
			return err
		}
		if pf.PCI != "" {
			if j, dup := seen[pf.PCI]; dup {
				return fmt.Errorf("pfs[%d]: PF %s is already listed in pfs[%d]", i, pf.PCI, j)
			}
			seen[pf.PCI] = i
		}
	}
	return nil
}

func (s *Spec) validatePF(i int, pf PFSpec) error {
	where := fmt.Sprintf("pfs[%d]", i)
	switch {
	case pf.PCI != "" && pf.Match != nil:
		return fmt.Errorf("%s: set either pci or match, not both", where)
	case pf.PCI == "" && pf.Match == nil:
		return fmt.Errorf("%s: set pci (e.g. 0000:18:00.0) or match (e.g. {vendor: 0x15b3})", where)
	}
	if pf.PCI != "" {
		if _, err := config.NormalizePCI(where+".pci", pf.PCI); err != nil {
			return err
		}
	}
	if pf.Match != nil {
		if !validPCIID(pf.Match.Vendor) {
			return fmt.Errorf("%s.match.vendor: %q is not a 4-digit hex PCI vendor ID such as 0x15b3", where, pf.Match.Vendor)
		}
		if pf.Match.Device != "" && !validPCIID(pf.Match.Device) {
			return fmt.Errorf("%s.match.device: %q is not a 4-digit hex PCI device ID such as 0x1021", where, pf.Match.Device)
		}
		if pf.VFOffset != nil || pf.VFStride != nil {
			return fmt.Errorf("%s: vfOffset and vfStride belong to one PF; list it by pci to set them", where)
		}
	}
	if pf.VFs < 0 || pf.VFs > MaxVFs {
		return fmt.Errorf("%s.vfs: %d is out of range 1..%d", where, pf.VFs, MaxVFs)
	}
	if pf.VFs == 0 && s.VFs == 0 {
		return fmt.Errorf("%s: no VF count; set vfs at the top or in the entry", where)
	}
	if pf.LinkType != "" {
		// An Ethernet PF under guids: pf-derived is fine: GUID steps skip it.
		if err := validLinkType(where+".linkType", pf.LinkType); err != nil {
			return err
		}
	}
	if (pf.VFOffset == nil) != (pf.VFStride == nil) {
		return fmt.Errorf("%s: set vfOffset and vfStride together", where)
	}
	if pf.VFOffset != nil && (*pf.VFOffset < 1 || *pf.VFOffset > 0xffff) {
		return fmt.Errorf("%s.vfOffset: %d is out of range 1..65535", where, *pf.VFOffset)
	}
	if pf.VFStride != nil && (*pf.VFStride < 1 || *pf.VFStride > 0xffff) {
		return fmt.Errorf("%s.vfStride: %d is out of range 1..65535", where, *pf.VFStride)
	}
	return nil
}

func validLinkType(field string, lt LinkType) error {
	switch lt {
	case LinkInfiniBand, LinkEthernet, LinkAuto:
		return nil
	}
	return fmt.Errorf("%s: %q is not one of infiniband, ethernet, auto", field, lt)
}

func validPCIID(id string) bool {
	h := strings.TrimPrefix(id, "0x")
	if len(h) != 4 {
		return false
	}
	for _, c := range h {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func validUnitName(u string) bool {
	dot := strings.LastIndexByte(u, '.')
	if dot < 1 || len(u) > 255 {
		return false
	}
	switch u[dot+1:] {
	case "service", "target", "socket", "mount", "path", "timer", "slice", "scope", "device", "swap", "automount":
	default:
		return false
	}
	for _, c := range u[:dot] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":-_.\\@", c)) {
			return false
		}
	}
	return true
}

// renameField reports a config error about the altName template under the
// spec field that holds it.
func renameField(err error, field string) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		return fmt.Errorf("invalid %s: %s", field, ce.Reason)
	}
	return fmt.Errorf("%s: %w", field, err)
}
