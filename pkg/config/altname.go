package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxAltNameLen is the kernel's limit for an alternative interface name
// (ALTIFNAMSIZ - 1).
const MaxAltNameLen = 127

// MaxIfNameLen is the kernel's limit for an interface name (IFNAMSIZ - 1).
const MaxIfNameLen = 15

// placeholderPF and placeholderVF are the widest values a template can see
// before sysfs is read: a PF address has a fixed width and a VF index has at
// most four digits (sriov_totalvfs is a 16-bit field).
const (
	placeholderPF = "0000:00:00.0"
	placeholderVF = 65535
)

// PCIToName turns a PCI address into the form used in names: ':' → '-'.
func PCIToName(addr string) string { return strings.ReplaceAll(addr, ":", "-") }

// ErrUnclosedBrace reports a template with a '{' that no '}' closes.
var ErrUnclosedBrace = errors.New("an unclosed '{'")

// Expand replaces every {key} of tmpl with what lookup returns for key and
// stops at the first lookup error. The altName template and hostconfig's
// Name= patterns share it.
func Expand(tmpl string, lookup func(key string) (string, error)) (string, error) {
	var b strings.Builder
	rest := tmpl
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return "", ErrUnclosedBrace
		}
		v, err := lookup(rest[i+1 : i+j])
		if err != nil {
			return "", err
		}
		b.WriteString(v)
		rest = rest[i+j+1:]
	}
	return b.String(), nil
}

// RenderAltName expands an altName template: {pci} is the VF address with
// ':' turned into '-', {pf} the PF address likewise and {vf} the VF index.
// The result is checked with ValidateAltName.
func RenderAltName(tmpl, vfPCI, pfPCI string, vfIndex int) (string, error) {
	t := truncate(tmpl, 64)
	name, err := Expand(tmpl, func(key string) (string, error) {
		switch key {
		case "pci":
			return PCIToName(vfPCI), nil
		case "pf":
			if pfPCI == "" {
				return "", fieldErr("altName", "template %q uses {pf} but VF %s has no PF", t, vfPCI)
			}
			return PCIToName(pfPCI), nil
		case "vf":
			if vfIndex < 0 {
				return "", fieldErr("altName", "template %q uses {vf} but VF %s has no VF index", t, vfPCI)
			}
			return strconv.Itoa(vfIndex), nil
		}
		return "", fieldErr("altName", "template %q has unknown placeholder {%s}; use {pci}, {pf} or {vf}", t, truncate(key, 32))
	})
	if errors.Is(err, ErrUnclosedBrace) {
		return "", fieldErr("altName", "template %q has an unclosed '{'", t)
	}
	if err != nil {
		return "", err
	}
	if err := ValidateAltName(name); err != nil {
		return "", fieldErr("altName", "template %q gives %v", t, err)
	}
	return name, nil
}

// ValidateAltNameTemplate checks a template without sysfs: every placeholder
// is known and the widest possible expansion is a valid altname.
func ValidateAltNameTemplate(tmpl string) error {
	_, err := RenderAltName(tmpl, placeholderPF, placeholderPF, placeholderVF)
	return err
}

// ValidateAltName checks the rules for an alternative name: 1 to 127 bytes
// of printable ASCII, not "." or "..", no '/'. ':' is refused
// too: the kernel would take it in an altname, but systemd.link and
// /proc/net/dev do not, and hostconfig writes the same names into .link files.
func ValidateAltName(name string) error {
	return validateName(name, MaxAltNameLen)
}

// ValidateIfName checks the kernel's rules for an interface name (15 bytes).
func ValidateIfName(name string) error {
	return validateName(name, MaxIfNameLen)
}

func validateName(name string, max int) error {
	switch {
	case name == "":
		return fmt.Errorf("an empty name")
	case len(name) > max:
		return fmt.Errorf("%q, longer than %d bytes", truncate(name, 40), max)
	case name == "." || name == "..":
		return fmt.Errorf("%q, which the kernel rejects", name)
	}
	// Printable ASCII only: the kernel's isspace() also treats byte 0xa0
	// (inside many UTF-8 sequences) as whitespace, and systemd.link names
	// are ASCII.
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '/' || c == ':' {
			return fmt.Errorf("%q, which contains '/', ':', whitespace, a control or a non-ASCII character", truncate(name, 40))
		}
	}
	return nil
}
