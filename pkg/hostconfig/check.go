package hostconfig

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Severity and Finding are the agent's one finding model (package
// finding); hostconfig --check and the doctor report in it.
type (
	Severity = finding.Severity
	Finding  = finding.Finding
)

// Severities.
const (
	SeverityError   = finding.Error
	SeverityWarning = finding.Warning
	SeverityInfo    = finding.Info
)

// Checks are the registered checks (package finding) Checker.Check reports,
// about the spec's PFs and VFs by PCI address; the doctor merges them with
// its own.
var Checks = []string{
	finding.CheckPFPresent, finding.CheckDriverBound, finding.CheckLinkLayer, finding.CheckSRIOVNumVFs,
	finding.CheckVFAddress, finding.CheckVFName, finding.CheckVFAltName,
	finding.CheckGUIDUnderivable, finding.CheckGUIDInvalid, finding.CheckGUIDMismatch, finding.CheckGUIDDuplicate,
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool { return finding.HasErrors(fs) }

// Checker compares a node with a spec.
type Checker struct {
	// SysfsRoot is where the node's sysfs is mounted ("/sys").
	SysfsRoot string
	// AltNames, when set, returns the altnames of a host netdev; sysfs does
	// not show them, so without it altnames are not checked. HostAltNames
	// looks them up when the sysfs checked is this network namespace's.
	AltNames func(ifname string) ([]string, error)
}

// HostAltNames returns the altnames of a netdev in the calling thread's
// network namespace: a Checker's AltNames when SysfsRoot is this namespace's
// /sys.
// Equivalent to: ip -o link show dev $ifname (its "altname" fields)
func HostAltNames(ifname string) ([]string, error) {
	link, err := netlinksafe.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("look up link %s: %w", ifname, err)
	}
	return link.Attrs().AltNames, nil
}

// Check compares the node under sysfsRoot with spec and returns what
// differs; see Checker.Check.
func Check(spec *Spec, sysfsRoot string) ([]Finding, error) {
	return Checker{SysfsRoot: sysfsRoot}.Check(spec)
}

// Check resolves the spec against the node and reports, per PF and VF, what
// Apply would change or could not fix: missing or non-SR-IOV
// PFs, VF counts, VF addresses that differ from the generated files, link
// layers, names, altnames, and GUIDs (zero, all-F, not the derived ones,
// duplicated). The error is only for a spec that cannot be resolved at all
// or an unreadable sysfs root; everything about the hardware is a finding.
// It reads sysfs and changes nothing.
func (c Checker) Check(spec *Spec) ([]Finding, error) {
	if c.SysfsRoot == "" {
		return nil, errors.New("no sysfs root to check")
	}
	if _, err := os.ReadDir(c.n().dev("")); err != nil {
		return nil, fmt.Errorf("sysfs root %s is not readable: %w", c.SysfsRoot, err)
	}
	plan, err := resolve(spec, c.SysfsRoot)
	if err != nil {
		return nil, err
	}
	r := &checkRun{c: c, n: c.n(), owners: map[sysfs.GUID][]string{}}
	for _, pf := range plan.PFs {
		r.checkPF(pf)
	}
	r.checkDuplicates()
	finding.SortBySeverity(r.out)
	return r.out, nil
}

func (c Checker) n() node { return node{root: c.SysfsRoot} }

type checkRun struct {
	c      Checker
	n      node
	out    []Finding
	owners map[sysfs.GUID][]string // node GUID → VF addresses, for duplicates
}

func (r *checkRun) add(sev Severity, check, subject, remedy, format string, args ...any) {
	r.out = append(r.out, Finding{Severity: sev, Check: check, Subject: subject, Message: fmt.Sprintf(format, args...), Remedy: remedy})
}

func (r *checkRun) rerun() string {
	return "systemctl restart " + UnitName + " (or run " + ApplyCommand + ") and read its log: journalctl -u " + UnitName
}

func (r *checkRun) checkPF(pf PFPlan) {
	if pf.Problem != nil {
		r.add(SeverityError, finding.CheckPFPresent, pf.PCI, "", "%v", pf.Problem)
		return
	}
	if !r.n.exists(pf.PCI) {
		r.add(SeverityError, finding.CheckPFPresent, pf.PCI, "check the card is seated and visible: lspci -s "+pf.PCI,
			"no such PCI device under %s/bus/pci/devices", r.c.SysfsRoot)
		return
	}
	if drv := r.n.driver(pf.PCI); drv == "" {
		r.add(SeverityError, finding.CheckDriverBound, pf.PCI, "load the driver (modprobe mlx5_core) and look for probe errors: dmesg | grep "+pf.PCI,
			"no driver is bound")
	}
	found, err := r.n.linkLayer(pf.PCI)
	if err != nil {
		r.add(SeverityWarning, finding.CheckLinkLayer, pf.PCI, "", "%v", err)
	} else if pf.LinkType != LinkAuto && found != pf.LinkType {
		r.add(SeverityError, finding.CheckLinkLayer, pf.PCI, linkTypeRemedy(pf.PCI, pf.LinkType),
			"port 1 runs %s, the spec wants %s", found, pf.LinkType)
	}
	numvfs, err := readInt(r.n.dev(pf.PCI, "sriov_numvfs"))
	if err != nil {
		r.add(SeverityError, finding.CheckSRIOVNumVFs, pf.PCI, "", "read sriov_numvfs: %v", err)
		return
	}
	if numvfs != pf.NumVFs {
		r.add(SeverityError, finding.CheckSRIOVNumVFs, pf.PCI, r.rerun(), "has %d VFs, the spec wants %d", numvfs, pf.NumVFs)
	}
	r.checkLink(pf.PCI, pf.Name, pf.AltName, false)

	var pfGUID sysfs.GUID
	guids := pf.GUIDs == GUIDPFDerived && found == LinkInfiniBand
	if guids {
		if pfGUID, err = r.n.pfGUID(pf.PCI); err == nil {
			err = CheckPFGUID(pfGUID)
		}
		if err != nil {
			guids = false
			r.add(SeverityError, finding.CheckGUIDUnderivable, pf.PCI,
				"set guids: none in the spec and assign VF GUIDs another way (subnet manager, ib-kubernetes)", "%v", err)
		}
	}
	for _, vf := range pf.VFs {
		if vf.Index >= numvfs {
			continue // reported as sriov-numvfs
		}
		r.checkVF(pf, vf, guids, pfGUID)
	}
}

func linkTypeRemedy(pci string, want LinkType) string {
	code := "1"
	if want == LinkEthernet {
		code = "2"
	}
	return fmt.Sprintf("set the port type in the firmware (mlxconfig -d %s set LINK_TYPE_P1=%s) and reboot; check the cable and switch port", pci, code)
}

func (r *checkRun) checkVF(pf PFPlan, vf VFPlan, guids bool, pfGUID sysfs.GUID) {
	if got := r.n.virtfn(pf.PCI, vf.Index); got != vf.PCI {
		if got == "" {
			r.add(SeverityError, finding.CheckVFAddress, vf.PCI, r.rerun(), "VF %d of PF %s is missing (no virtfn%d)", vf.Index, pf.PCI, vf.Index)
		} else {
			r.add(SeverityError, finding.CheckVFAddress, got, "regenerate the files on this node: sriov-stable-agent hostconfig --sysfs-root /sys ...",
				"VF %d of PF %s is %s, the generated files expect %s", vf.Index, pf.PCI, got, vf.PCI)
		}
		return
	}
	if r.n.driver(vf.PCI) == "" {
		r.add(SeverityError, finding.CheckDriverBound, vf.PCI, "bind it: echo "+vf.PCI+" > "+r.c.SysfsRoot+"/bus/pci/drivers_probe; look for probe errors in dmesg",
			"no driver is bound")
		return
	}
	r.checkLink(vf.PCI, vf.Name, vf.AltName, true)
	if !guids {
		return
	}
	dir := r.n.rdma(vf.PCI)
	if dir == "" {
		r.add(SeverityInfo, finding.CheckGUIDMismatch, vf.PCI, "", "no RDMA device on the host (in a pod, or mlx5_ib not loaded): GUIDs not checked")
		return
	}
	want, err := DeriveVFGUIDs(pfGUID, vf.Index)
	if err != nil {
		r.add(SeverityError, finding.CheckGUIDUnderivable, vf.PCI, "", "%v", err)
		return
	}
	node, err := nodeGUID(dir)
	switch {
	case err != nil:
		r.add(SeverityError, finding.CheckGUIDInvalid, vf.PCI, "", "read node GUID: %v", err)
	case !node.Valid():
		r.add(SeverityError, finding.CheckGUIDInvalid, vf.PCI, r.rerun(), "node GUID is %s (unset), want %s", node.Colon(), want.Node.Colon())
	case node != want.Node:
		r.add(SeverityError, finding.CheckGUIDMismatch, vf.PCI, r.rerun(), "node GUID is %s, want %s", node.Colon(), want.Node.Colon())
	}
	if err == nil && node.Valid() {
		r.owners[node] = append(r.owners[node], vf.PCI)
	}
	port, err := portGUID(dir)
	switch {
	case err != nil:
		r.add(SeverityWarning, finding.CheckGUIDInvalid, vf.PCI, "", "read port GUID: %v", err)
	case port == sysfs.GUIDZero:
		r.add(SeverityInfo, finding.CheckGUIDInvalid, vf.PCI, "", "port GUID not reported yet (GID 0 is zero): not checked")
	case port != want.Port:
		r.add(SeverityError, finding.CheckGUIDMismatch, vf.PCI, r.rerun(), "port GUID is %s, want %s", port.Colon(), want.Port.Colon())
	}
}

// checkLink compares a function's host netdev with the wanted name and
// altname ("" for either: not managed).
func (r *checkRun) checkLink(pci, name, alt string, isVF bool) {
	if name == "" && alt == "" {
		return
	}
	devs := r.n.netdevs(pci)
	if len(devs) == 0 {
		if isVF {
			r.add(SeverityInfo, finding.CheckVFName, pci, "", "no netdev on the host (in a pod, or ib_ipoib not loaded): name not checked")
		}
		return
	}
	cur := devs[0]
	if name != "" && cur != name {
		r.add(SeverityError, finding.CheckVFName, pci,
			"install the .link files into /etc/systemd/network (and the initramfs: update-initramfs -u), then "+r.rerun(),
			"netdev is %s, the spec wants %s", cur, name)
	}
	if alt == "" || r.c.AltNames == nil {
		return
	}
	alts, err := r.c.AltNames(cur)
	if err != nil {
		r.add(SeverityWarning, finding.CheckVFAltName, pci, "", "read altnames of %s: %v", cur, err)
		return
	}
	for _, a := range alts {
		if a == alt {
			return
		}
	}
	r.add(SeverityError, finding.CheckVFAltName, pci, "ip link property add dev "+cur+" altname "+alt+", or "+r.rerun(),
		"%s lacks altname %s (has: %s)", cur, alt, strings.Join(alts, ", "))
}

// checkDuplicates reports node GUIDs shared by two of the spec's VFs or by
// one of them and any other RDMA device on the node.
func (r *checkRun) checkDuplicates() {
	others, err := sysfs.Reader{Root: r.c.SysfsRoot}.NodeGUIDs()
	if err == nil {
		for g, pcis := range others {
			if _, ours := r.owners[g]; !ours {
				continue
			}
			for _, pci := range pcis {
				if !contains(r.owners[g], pci) {
					r.owners[g] = append(r.owners[g], pci)
				}
			}
		}
	}
	for g, pcis := range r.owners {
		if len(pcis) < 2 {
			continue
		}
		sort.Strings(pcis)
		r.add(SeverityError, finding.CheckGUIDDuplicate, pcis[0], r.rerun(),
			"node GUID %s is shared by %s", g.Colon(), strings.Join(pcis, ", "))
	}
	sort.SliceStable(r.out, func(i, j int) bool { return r.out[i].Subject < r.out[j].Subject })
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
