package hostconfig

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// renderName expands a Name= pattern: {pfidx} is the PF's position among
// the spec's PFs sorted by PCI address, {vf} the VF index (vf < 0: a PF
// pattern, where {vf} is an error). The result must be a legal interface
// name that nobody else assigns.
func renderName(field, pattern string, pfidx, vf int) (string, error) {
	name, err := config.Expand(pattern, func(key string) (string, error) {
		switch key {
		case "pfidx":
			return strconv.Itoa(pfidx), nil
		case "vf":
			if vf < 0 {
				return "", fmt.Errorf("%s: pattern %q uses {vf}, which a PF does not have; use {pfidx}", field, pattern)
			}
			return strconv.Itoa(vf), nil
		}
		return "", fmt.Errorf("%s: pattern %q has unknown placeholder {%s}; use {pfidx} or {vf}", field, pattern, key)
	})
	if errors.Is(err, config.ErrUnclosedBrace) {
		return "", fmt.Errorf("%s: pattern %q has an unclosed '{'", field, pattern)
	}
	if err != nil {
		return "", err
	}
	if err := config.ValidateIfName(name); err != nil {
		return "", fmt.Errorf("%s: pattern %q gives %v", field, pattern, err)
	}
	if vfnet.KindOf(name) != vfnet.NameChosen {
		return "", fmt.Errorf("%s: pattern %q gives %q, a name the kernel or a runtime assigns on its own (eth<N>, ib<N>, wlan<N>, dev<N>, net<N>); put a letter between the prefix and the number, e.g. %q",
			field, pattern, name, "ib{pfidx}v{vf}")
	}
	return name, nil
}

// validNamePattern checks a pattern before the PFs are known: placeholders
// and characters, with the narrowest values.
func validNamePattern(field, pattern string, isVF bool) error {
	vf := -1
	if isVF {
		vf = 0
	}
	_, err := renderName(field, pattern, 0, vf)
	return err
}
