package hostconfig

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// Plan is a spec resolved against a PF set: every PF and VF with its
// address, names and settings. Render turns it into files; Check compares
// a node with it.
type Plan struct {
	Spec *Spec
	PFs  []PFPlan
}

// PFPlan is one PF of the plan.
type PFPlan struct {
	Index    int    // {pfidx}: position among the plan's PFs by PCI address
	Entry    int    // the pfs[] entry that selected it
	PCI      string // 0000:18:00.0
	NumVFs   int
	LinkType LinkType
	// GUIDs is the scheme for this PF: none on Ethernet PFs.
	GUIDs   GUIDScheme
	Name    string // Name= ("" keeps the kernel's name)
	AltName string // AlternativeName= ("" none)
	// VFs lists the VFs by index. Empty when Problem is set.
	VFs []VFPlan
	// Problem says why the VF addresses are unknown (Check reports it as a
	// finding; Resolve fails with it).
	Problem error
}

// problem is Problem naming the PF, or nil.
func (pf PFPlan) problem() error {
	if pf.Problem == nil {
		return nil
	}
	return fmt.Errorf("%w %s (pfs[%d]): %w", ErrPFUnresolved, pf.PCI, pf.Entry, pf.Problem)
}

// VFPlan is one VF of the plan.
type VFPlan struct {
	Index   int
	PCI     string
	Name    string
	AltName string
}

// ErrPFUnresolved wraps the reasons a PF's VF addresses cannot be known.
var ErrPFUnresolved = errors.New("cannot resolve PF")

// Resolve selects the spec's PFs and works out each VF's address and names.
// With sysfsRoot "" it reads nothing: PFs must be listed by pci with
// vfOffset and vfStride. With a sysfs root it matches rules against the
// devices there, reads sriov_offset/sriov_stride and the existing virtfnN
// links, and checks sriov_totalvfs.
func Resolve(spec *Spec, sysfsRoot string) (*Plan, error) {
	p, err := resolve(spec, sysfsRoot)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, pf := range p.PFs {
		if err := pf.problem(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// resolve builds the plan, leaving per-PF hardware problems in
// PFPlan.Problem; spec-level errors (names, matches) are returned.
func resolve(spec *Spec, sysfsRoot string) (*Plan, error) {
	n := node{root: sysfsRoot}
	owner := map[string]int{} // PF address → pfs[] entry
	for i, e := range spec.PFs {
		if e.PCI != "" {
			pci, _ := config.NormalizePCI("pci", e.PCI) // validated by ParseSpec
			if _, taken := owner[pci]; !taken {
				owner[pci] = i
			}
			continue
		}
		if sysfsRoot == "" {
			return nil, fmt.Errorf("pfs[%d]: match %s needs --sysfs-root to find the PFs; or list them by pci", i, e.Match)
		}
		found, err := n.matchPFs(*e.Match)
		if err != nil {
			return nil, fmt.Errorf("pfs[%d]: %w", i, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("pfs[%d]: match %s found no SR-IOV capable PF under %s/bus/pci/devices (is SR-IOV enabled in the BIOS and firmware, and the driver loaded?)", i, e.Match, sysfsRoot)
		}
		for _, pci := range found {
			if _, taken := owner[pci]; !taken {
				owner[pci] = i
			}
		}
	}
	addrs := make([]string, 0, len(owner))
	for pci := range owner {
		addrs = append(addrs, pci)
	}
	sort.Strings(addrs)

	p := &Plan{Spec: spec}
	for idx, pci := range addrs {
		pf, err := planPF(spec, n, idx, owner[pci], pci)
		if err != nil {
			return nil, err
		}
		p.PFs = append(p.PFs, pf)
	}
	if err := p.checkUnique(); err != nil {
		return nil, err
	}
	return p, nil
}

func planPF(spec *Spec, n node, idx, entry int, pci string) (PFPlan, error) {
	e := spec.PFs[entry]
	pf := PFPlan{Index: idx, Entry: entry, PCI: pci, NumVFs: spec.VFs, LinkType: spec.LinkType, GUIDs: spec.GUIDs}
	if e.VFs > 0 {
		pf.NumVFs = e.VFs
	}
	if e.LinkType != "" {
		pf.LinkType = e.LinkType
	}
	if pf.LinkType == LinkEthernet {
		pf.GUIDs = GUIDNone
	}
	var err error
	if spec.PFName != "" {
		if pf.Name, err = renderName("pfName", spec.PFName, idx, -1); err != nil {
			return pf, fmt.Errorf("PF %s: %w", pci, err)
		}
	}
	if *spec.PFAltName != "" {
		if pf.AltName, err = config.RenderAltName(*spec.PFAltName, pci, "", -1); err != nil {
			return pf, fmt.Errorf("PF %s: %w", pci, renameField(err, "pfAltName"))
		}
	}
	addrs, err := vfAddresses(n, entry, e, pci, pf.NumVFs)
	if err != nil {
		pf.Problem = err
		return pf, nil
	}
	for i, vfPCI := range addrs {
		vf := VFPlan{Index: i, PCI: vfPCI}
		if vf.Name, err = renderName("vfName", spec.VFName, idx, i); err != nil {
			return pf, fmt.Errorf("VF %d of PF %s: %w", i, pci, err)
		}
		if vf.AltName, err = config.RenderAltName(spec.AltName, vfPCI, pci, i); err != nil {
			return pf, fmt.Errorf("VF %d of PF %s: %w", i, pci, err)
		}
		pf.VFs = append(pf.VFs, vf)
	}
	return pf, nil
}

// vfAddresses works out the addresses of VFs 0..count-1 of pf: existing
// virtfnN links first, then First VF Offset and VF Stride from sysfs or the
// spec, which must agree with each other and with the links.
func vfAddresses(n node, entry int, e PFSpec, pf string, count int) ([]string, error) {
	offset, stride, known := 0, 0, false
	if e.VFOffset != nil {
		offset, stride, known = *e.VFOffset, *e.VFStride, true
	}
	if n.root == "" {
		if !known {
			return nil, fmt.Errorf("VF addresses unknown: run with --sysfs-root /sys on the node, or set vfOffset and vfStride (lspci -vvv -s %s shows them as 'VF offset' and 'stride')", pf)
		}
		return computeVFs(pf, offset, stride, count)
	}
	if !n.exists(pf) {
		if known {
			return computeVFs(pf, offset, stride, count)
		}
		return nil, fmt.Errorf("no such PCI device under %s/bus/pci/devices: is the card seated and visible in lspci? (set vfOffset and vfStride to generate without it)", n.root)
	}
	total, err := readInt(n.dev(pf, "sriov_totalvfs"))
	if err != nil {
		return nil, fmt.Errorf("not SR-IOV capable (%w): enable SR-IOV in the BIOS and the NIC firmware (ConnectX: mlxconfig -d %s set SRIOV_EN=1 NUM_OF_VFS=%d, then reboot)", err, pf, count)
	}
	if total < count {
		return nil, fmt.Errorf("supports %d VFs (sriov_totalvfs), the spec wants %d: raise it in the firmware (ConnectX: mlxconfig -d %s set NUM_OF_VFS=%d, then reboot) or lower vfs", total, count, pf, count)
	}
	sysOff, okOff, err := readOptInt(n.dev(pf, "sriov_offset"))
	if err != nil {
		return nil, err
	}
	sysStride, okStride, err := readOptInt(n.dev(pf, "sriov_stride"))
	if err != nil {
		return nil, err
	}
	if okOff && okStride {
		if known && (sysOff != offset || sysStride != stride) {
			return nil, fmt.Errorf("pfs[%d] says vfOffset %d, vfStride %d but sysfs says sriov_offset %d, sriov_stride %d: fix or drop them in the spec", entry, offset, stride, sysOff, sysStride)
		}
		offset, stride, known = sysOff, sysStride, true
	}
	var computed []string
	if known {
		if computed, err = computeVFs(pf, offset, stride, count); err != nil {
			return nil, err
		}
	}
	out := make([]string, count)
	for i := range out {
		linked := n.virtfn(pf, i)
		switch {
		case linked != "" && computed != nil && linked != computed[i]:
			return nil, fmt.Errorf("virtfn%d is %s but offset %d and stride %d give %s", i, linked, offset, stride, computed[i])
		case linked != "":
			out[i] = linked
		case computed != nil:
			out[i] = computed[i]
		default:
			return nil, fmt.Errorf("VF %d does not exist yet and sysfs has no sriov_offset/sriov_stride to compute its address: create the VFs first (echo %d > %s) or set vfOffset and vfStride", i, count, n.dev(pf, "sriov_numvfs"))
		}
	}
	return out, nil
}

// computeVFs applies the SR-IOV routing ID rule: VF i of a PF with routing ID
// rid is at rid + offset + i*stride (bus<<8 | device<<3 | function), in the
// PF's PCI domain.
func computeVFs(pf string, offset, stride, count int) ([]string, error) {
	domain, rid, err := parseRID(pf)
	if err != nil {
		return nil, err
	}
	out := make([]string, count)
	for i := range out {
		r := rid + offset + i*stride
		if r > 0xffff {
			return nil, fmt.Errorf("VF %d at routing ID %#x is past the last bus of domain %04x: check vfOffset %d and vfStride %d", i, r, domain, offset, stride)
		}
		out[i] = fmt.Sprintf("%04x:%02x:%02x.%x", domain, r>>8, (r>>3)&0x1f, r&7)
	}
	return out, nil
}

// parseRID splits dddd:bb:dd.f into the domain and the 16-bit routing ID.
func parseRID(pci string) (domain, rid int, err error) {
	bad := fmt.Errorf("PCI address %q is not dddd:bb:dd.f", pci)
	parts := strings.Split(pci, ":")
	if len(parts) != 3 {
		return 0, 0, bad
	}
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 {
		return 0, 0, bad
	}
	d, err1 := strconv.ParseUint(parts[0], 16, 32)
	bus, err2 := strconv.ParseUint(parts[1], 16, 8)
	dev, err3 := strconv.ParseUint(devfn[0], 16, 8)
	fn, err4 := strconv.ParseUint(devfn[1], 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || dev > 0x1f || fn > 7 {
		return 0, 0, bad
	}
	return int(d), int(bus<<8 | dev<<3 | fn), nil
}

// checkUnique fails when two links would get the same name or altname
// (they share one namespace in the kernel) or one PCI address would be
// claimed twice (two VFs, or a VF and a PF).
func (p *Plan) checkUnique() error {
	names := map[string]string{}
	claim := func(name, who string) error {
		if name == "" {
			return nil
		}
		if other, dup := names[name]; dup {
			return fmt.Errorf("%s and %s would both be named %q: make the patterns tell them apart ({pfidx} and {vf} in vfName, {pci} in altName)", other, who, name)
		}
		names[name] = who
		return nil
	}
	vfOwner := map[string]string{}
	for _, pf := range p.PFs {
		vfOwner[pf.PCI] = "PF " + pf.PCI
	}
	for _, pf := range p.PFs {
		if err := claim(pf.Name, "PF "+pf.PCI); err != nil {
			return err
		}
		if err := claim(pf.AltName, "PF "+pf.PCI+" (altname)"); err != nil {
			return err
		}
		for _, vf := range pf.VFs {
			who := fmt.Sprintf("VF %d of PF %s", vf.Index, pf.PCI)
			if other, dup := vfOwner[vf.PCI]; dup {
				return fmt.Errorf("%s and %s both resolve to PCI address %s: check vfOffset and vfStride", other, who, vf.PCI)
			}
			vfOwner[vf.PCI] = who
			if err := claim(vf.Name, who); err != nil {
				return err
			}
			if err := claim(vf.AltName, who+" (altname)"); err != nil {
				return err
			}
		}
	}
	return nil
}

// VFCount is the number of VFs in the plan.
func (p *Plan) VFCount() int {
	n := 0
	for _, pf := range p.PFs {
		n += len(pf.VFs)
	}
	return n
}
