package vfnet

import "strings"

// NameKind says who hands out an interface name of a given shape: a VF
// carrying one of these shapes on the host has a name it may lose, or one
// another VF may take, at any moment. This is the one rule the plugin's
// DEL, the doctor, the host janitor's proof and hostconfig's name check
// share.
type NameKind int

// Name kinds: a prefix and nothing but digits after it.
const (
	NameChosen NameKind = iota // none of the shapes below: someone chose it (udev, a .link file, an operator)
	NameProbe                  // eth<N>, ib<N>, wlan<N>: the kernel's at probe, in probe order
	NameClash                  // dev<N>: the kernel's for a device coming home whose name is taken
	NamePod                    // net<N>: a pod interface name (CNI, Multus)
)

var namePrefixes = []struct {
	prefix string
	kind   NameKind
}{{"eth", NameProbe}, {"ib", NameProbe}, {"wlan", NameProbe}, {"dev", NameClash}, {"net", NamePod}}

// KindOf classifies name.
func KindOf(name string) NameKind {
	for _, p := range namePrefixes {
		digits, ok := strings.CutPrefix(name, p.prefix)
		if ok && digits != "" && strings.Trim(digits, "0123456789") == "" {
			return p.kind
		}
	}
	return NameChosen
}

// Transient reports the kinds another VF may come home with at any moment
// (pod names, the kernel's dev<ifindex>): checking that such a name is
// free is not enough, since it can be taken between the check and its use.
func (k NameKind) Transient() bool { return k == NamePod || k == NameClash }

// Kernel reports the kinds the kernel itself gives (at probe or on a name
// clash): no persistent naming rule applied.
func (k NameKind) Kernel() bool { return k == NameProbe || k == NameClash }
