// Package hostvf owns what the host netns holds of free VFs: which of
// them carry a name or altnames an attachment, a pod or the kernel left
// behind (FindLeftovers), and how to put them right (Remedy). The doctor's
// vf-leftover check reports them; the janitor, with Strict, repairs them.
package hostvf

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Leftover is a free VF in the host netns with a name or altnames left
// behind: how it is named now and what would put it right.
type Leftover struct {
	PCI, PF   string
	Index     int  // the VF's index on its PF
	LinkIndex int  // its netdev's ifindex
	Up        bool // its netdev is up
	Name      string
	AltNames  []string
	// Rename is the host name to give it back ("" keeps its name), and
	// RenameFrom where that name comes from: the hostconfig spec, a .link
	// file, or the PCI address when neither names the VF.
	Rename, RenameFrom string
	// NameTakenBy is the link that already holds Rename, if any.
	NameTakenBy string
	// StaleAltNames are the altnames to remove: a pod's, another VF's
	// stable altname, or names in the kernel's and runtimes' style.
	StaleAltNames []string
	// Problem says what is wrong, for people.
	Problem string
}

// Input is what FindLeftovers judges a node's host netns with.
type Input struct {
	SysfsRoot string
	AltName   string           // the plugin's altName template ("" is the default)
	Records   []*state.Record  // every attachment record: who owns which VF, and the names pods use
	Links     []netlink.Link   // the links of the host network namespace
	Spec      *hostconfig.Spec // the node's hostconfig spec, for host names; nil for none
	LinkDir   string           // where hostconfig's .link files are installed ("" for none)
	// History holds more names the plugin's attachments of each VF carried
	// in their pods, by the VF's PCI address: the ifnames and altnames of
	// records that are gone, names a check saw the VF under in its pod.
	History map[string][]string
	// Strict reports only what is proven a leftover, as the monitor's host
	// repairs need before they rename anything: a name or altname that an
	// attachment of this very VF carried in its pod (its record, kept while
	// the pod's netns is gone, or History says so), the kernel's dev<N> on
	// a VF that was attached (the name it comes home under when its pod
	// name is taken), or another VF's stable altname. A name that is only
	// shaped like a pod's (net<N>, dev<N>), equal to some other pod's
	// ifname, or the kernel's probe name is then left alone. Without
	// Strict (the doctor) those are reported too, for a person to judge.
	Strict bool
}

// Host name sources, in the order they are tried.
const (
	FromSpec     = "hostconfig spec"
	FromLinkFile = ".link file"
	FromPCI      = "PCI address"
)

// hostName is what the spec or a .link file names a VF on the host.
type hostName struct{ name, altName, from string }

// FindLeftovers lists the free VFs of the host netns that carry a name or
// altnames left behind. A VF is free when no record claims it, or only
// records whose netns is gone. With Strict, only what is proven left over
// by an attachment of the VF is listed. notes says what could not be used
// (a spec that does not resolve, unreadable .link files); err is a sysfs
// failure.
func FindLeftovers(in Input) (found []Leftover, notes []string, err error) {
	if in.AltName == "" {
		in.AltName = config.DefaultAltName
	}
	sys := sysfs.Reader{Root: in.SysfsRoot}
	vfs, err := listVFs(sys)
	if err != nil {
		return nil, nil, err
	}
	names, notes := hostNames(in)
	claimed := map[string]bool{}
	podNames := map[string]bool{}
	podAlts := map[string]bool{}
	attached := map[string]map[string]bool{} // VF → names its attachments carried in their pods
	carried := func(pci, name string) {
		if name == "" {
			return
		}
		if attached[pci] == nil {
			attached[pci] = map[string]bool{}
		}
		attached[pci][name] = true
	}
	for _, r := range in.Records {
		if vfnet.NetnsAlive(r.Netns) {
			claimed[r.PCI] = true
		}
		podNames[r.IfName] = true
		if r.AltName != "" {
			podAlts[r.AltName] = true
		}
		carried(r.PCI, r.IfName)
		carried(r.PCI, r.AltName)
	}
	for pci, used := range in.History {
		for _, n := range used {
			podNames[n] = true
			carried(pci, n)
		}
	}
	stable := map[string]string{} // VF → its stable altname
	stableAlts := map[string]bool{}
	for _, v := range vfs {
		if alt, err := config.RenderAltName(in.AltName, v.Addr, v.PF, v.Index); err == nil {
			stable[v.Addr] = alt
			stableAlts[alt] = true // another VF's stable altname is stale on this one
			podAlts[alt] = true
		}
	}
	byName := map[string]netlink.Link{}
	byAlt := map[string]netlink.Link{}
	byParent := map[string][]string{}
	for _, l := range in.Links {
		a := l.Attrs()
		byName[a.Name] = l
		for _, alt := range a.AltNames {
			byAlt[alt] = l
		}
		if a.ParentDevBus == "pci" {
			byParent[a.ParentDev] = append(byParent[a.ParentDev], a.Name)
		}
	}
	for _, v := range vfs {
		if claimed[v.Addr] {
			continue
		}
		for _, name := range uniq(append(slices.Clone(v.Netdevs), byParent[v.Addr]...)) {
			l, ok := byName[name]
			if !ok {
				continue // sysfs was mounted in another netns
			}
			j := judge{v: v, link: l, stable: stable[v.Addr], want: names[v.Addr], podNames: podNames, podAlts: podAlts,
				strict: in.Strict, attached: attached[v.Addr], stableAlts: stableAlts, byName: byName, byAlt: byAlt}
			if lo, ok := j.leftover(); ok {
				found = append(found, lo)
			}
		}
	}
	return found, notes, nil
}

// judge decides about one host netdev of one free VF.
type judge struct {
	v                 *sysfs.Function
	link              netlink.Link
	stable            string
	want              hostName
	podNames, podAlts map[string]bool
	// With strict, only attached (the names this VF's attachments carried
	// in their pods) and stableAlts (every VF's stable altname) count.
	strict               bool
	attached, stableAlts map[string]bool
	byName, byAlt        map[string]netlink.Link
}

func (j judge) leftover() (Leftover, bool) {
	a := j.link.Attrs()
	lo := Leftover{PCI: j.v.Addr, PF: j.v.PF, Index: j.v.Index, LinkIndex: a.Index, Up: a.Flags&net.FlagUp != 0, Name: a.Name, AltNames: a.AltNames}
	var problems []string
	why := j.badName(a.Name)
	if why != "" {
		lo.Rename, lo.RenameFrom = j.want.name, j.want.from
		if lo.Rename == "" {
			lo.Rename, lo.RenameFrom = vfnet.FallbackName(j.v.Addr), FromPCI
		}
		if lo.Rename == a.Name {
			lo.Rename, lo.RenameFrom, why = "", "", ""
		}
	}
	if why != "" {
		problems = append(problems, fmt.Sprintf("is named %s, %s", a.Name, why))
		if holder := j.holder(lo.Rename); holder != "" {
			lo.NameTakenBy = holder
		}
	}
	for _, alt := range a.AltNames {
		if alt == j.stable || alt == j.want.altName {
			continue
		}
		if j.staleAltName(alt) {
			lo.StaleAltNames = append(lo.StaleAltNames, alt)
		}
	}
	if len(lo.StaleAltNames) > 0 {
		problems = append(problems, fmt.Sprintf("carries altnames left by a pod or another VF (%s)", strings.Join(lo.StaleAltNames, ", ")))
	}
	if len(problems) == 0 {
		return Leftover{}, false
	}
	lo.Problem = strings.Join(problems, " and ")
	return lo, true
}

// staleAltName reports whether alt, neither the VF's stable altname nor
// the one its host name comes with, was left on it.
func (j judge) staleAltName(alt string) bool {
	if j.strict {
		return j.attached[alt] || j.stableAlts[alt]
	}
	return j.podAlts[alt] || j.podNames[alt] || vfnet.KindOf(alt) != vfnet.NameChosen
}

// badName says why name is one to give back, or "".
func (j judge) badName(name string) string {
	if j.strict {
		switch {
		case j.attached[name]:
			return "a name an attachment of this VF carried in its pod (it came back from a pod network namespace deleted without DEL)"
		case len(j.attached) > 0 && vfnet.KindOf(name) == vfnet.NameClash:
			return "the kernel's name for a device that came home while its name was taken, and this VF was attached to a pod"
		}
		return ""
	}
	switch {
	case vfnet.KindOf(name) == vfnet.NamePod:
		return "a pod interface name (it came back from a pod network namespace deleted without DEL)"
	case vfnet.KindOf(name) == vfnet.NameClash:
		return "the kernel's name for a device that came home while its name was taken"
	case j.podNames[name]:
		return "the interface name of a pod"
	case j.want.name != "" && name != j.want.name && (vfnet.KindOf(name) == vfnet.NameProbe || name == vfnet.FallbackName(j.v.Addr)):
		return "not the name the " + j.want.from + " gives it (" + j.want.name + ")"
	}
	return ""
}

// holder names the link other than this VF's that has name as its name or
// an altname, or "".
func (j judge) holder(name string) string {
	for _, l := range []netlink.Link{j.byName[name], j.byAlt[name]} {
		if l != nil && l.Attrs().Index != j.link.Attrs().Index {
			return l.Attrs().Name
		}
	}
	return ""
}

// listVFs lists every VF of any vendor (a PCI function with a physfn
// link), with its PF, index and host netdevs.
func listVFs(sys sysfs.Reader) ([]*sysfs.Function, error) {
	fns, _, err := sys.Functions(nil)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(fns, func(f *sysfs.Function) bool { return !f.IsVF() }), nil
}

// hostNames maps VFs to the host names the spec gives them, else those of
// the .link files in LinkDir.
func hostNames(in Input) (map[string]hostName, []string) {
	names := map[string]hostName{}
	var notes []string
	if in.LinkDir != "" {
		links, err := hostconfig.ReadLinkNames(in.LinkDir)
		if err != nil {
			notes = append(notes, err.Error())
		}
		for pci, n := range links {
			names[pci] = hostName{name: n.Name, altName: n.AltName, from: FromLinkFile + " " + n.File}
		}
	}
	if in.Spec != nil {
		plan, err := hostconfig.Resolve(in.Spec, in.SysfsRoot)
		if err != nil {
			notes = append(notes, fmt.Sprintf("host names from the hostconfig spec not used: %v", err))
		} else {
			for _, pf := range plan.PFs {
				for _, vf := range pf.VFs {
					names[vf.PCI] = hostName{name: vf.Name, altName: vf.AltName, from: FromSpec}
				}
			}
		}
	}
	return names, notes
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// Remedy is the operator's fix for a leftover: the agent's repair,
// or the commands it would run.
func Remedy(lo Leftover) string {
	var cmds []string
	name := lo.Name
	if lo.Rename != "" {
		if lo.NameTakenBy != "" {
			return fmt.Sprintf("%s, the name the %s gives it, is held by %s: sort out which link should have it, then rename %s", lo.Rename, lo.RenameFrom, lo.NameTakenBy, lo.Name)
		}
		if lo.Up {
			cmds = append(cmds, "ip link set dev "+name+" down")
		}
		cmds = append(cmds, "ip link set dev "+name+" name "+lo.Rename)
		if lo.Up {
			cmds = append(cmds, "ip link set dev "+lo.Rename+" up")
		}
		name = lo.Rename
	}
	for _, alt := range lo.StaleAltNames {
		cmds = append(cmds, "ip link property del dev "+name+" altname "+alt)
	}
	return "sriov-stable-agent monitor --repair=host does this once it can prove the name came back from one of the VF's attachments; by hand: " +
		strings.Join(cmds, "; ")
}
