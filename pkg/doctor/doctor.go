// Package doctor checks a node for the root causes that broke SR-IOV
// InfiniBand attachments in the field — driver built for another kernel,
// old firmware, IB ports fallen back to Ethernet, ports down, unset or
// duplicate GUIDs, missing VFs, unstable VF names — and reports each as a
// structured finding with a remedy. It reads sysfs, the kernel log and the
// host netns's links; it changes nothing.
package doctor

import (
	"fmt"
	"regexp"

	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Severity and Finding are the agent's one finding model (package
// finding), which hostconfig's merged findings share. Errors break
// attachments (the doctor exits non-zero); warnings are risks or degraded
// setups; info says what could not be checked. A finding's subject is a
// PCI address, a kernel module, or "node".
type (
	Severity = finding.Severity
	Finding  = finding.Finding
)

// Severities, most severe first.
const (
	SeverityError   = finding.Error
	SeverityWarning = finding.Warning
	SeverityInfo    = finding.Info
)

// Severities lists every severity, most severe first.
var Severities = finding.Severities

// Check names, one per lesson learned; they are stable: the agent exports
// them as metric labels. Those hostconfig --check reports too are package
// finding's.
const (
	CheckDevices              = "devices"                // what was found, or that nothing was
	CheckSysfs                = "sysfs"                  // a sysfs entry that could not be read or parsed
	CheckDriverLoaded         = "driver-loaded"          // mlx5_core (and mlx5_ib) loaded
	CheckDriverBound          = finding.CheckDriverBound // every Mellanox PF bound to mlx5_core
	CheckDriverKernelMismatch = "driver-kernel-mismatch" // "Unknown symbol", "version magic" in the kernel log
	CheckDriverProbe          = "driver-probe"           // probe failures in the kernel log
	CheckKernelLog            = "kernel-log"             // the kernel log could not be read
	CheckRDMADevice           = "rdma-device"            // a bound PF without an RDMA device
	CheckFirmwareVersion      = "firmware-version"       // fw_ver against the minimum per device ID
	CheckLinkLayer            = finding.CheckLinkLayer   // InfiniBand expected, Ethernet found (or the reverse)
	CheckPortState            = "port-state"             // port not ACTIVE / LinkUp
	CheckGUIDInvalid          = finding.CheckGUIDInvalid
	CheckGUIDDuplicate        = finding.CheckGUIDDuplicate
	CheckSRIOVNumVFs          = finding.CheckSRIOVNumVFs
	CheckVFName               = finding.CheckVFName
	CheckVFAltName            = finding.CheckVFAltName
	// CheckVFLeftover (leftover.go, with Options.StateDir): a free VF with
	// a name or altnames a pod or the kernel left on it.
	// With Options.Spec, hostconfig's checks join these under their own
	// names (hostconfig.CheckPFPresent, CheckVFAddress, CheckGUIDMismatch, …).
	CheckSpec = hostconfig.CheckSpec // the spec does not resolve on this node
)

// Options says where to look and what to expect. The zero value checks
// /sys with no expectations beyond the built-in ones.
type Options struct {
	// SysfsRoot is where sysfs is mounted; "" means /sys.
	SysfsRoot string
	// KernelLog is /dev/kmsg or a file with dmesg output; "" skips the
	// kernel log checks.
	KernelLog string
	// ExpectVFs is the number of VFs every Mellanox PF should have; 0 means
	// no expectation.
	ExpectVFs int
	// LinkLayer is the expected link layer of every Mellanox port:
	// config.LinkLayerInfiniBand, config.LinkLayerEthernet, or "" / auto for
	// none.
	LinkLayer string
	// AltName is the plugin's altName template; "" means config.DefaultAltName.
	AltName string
	// NamePattern, when set, is what every host VF netdev name must match.
	// Without it, only names the kernel assigns (eth0, ib3, dev12) and pod
	// names that came back from a deleted netns (net1) are reported.
	NamePattern *regexp.Regexp
	// Spec, when set, is the node's hostconfig spec: the node is also
	// compared with it (hostconfig's --check), and its findings are merged.
	Spec *hostconfig.Spec
	// StateDir, when set, is the plugin's state directory: VFs of this
	// netns that no attachment record claims are checked for names and
	// altnames a pod left on them (CheckVFLeftover).
	StateDir string
	// LinkDir is where hostconfig's .link files are installed; with
	// StateDir, the host names they give VFs are the ones to give back.
	LinkDir string
}

// Report is the outcome of one doctor run.
type Report struct {
	SysfsRoot string `json:"sysfsRoot"`
	PFs       int    `json:"pfs"` // Mellanox physical functions found
	VFs       int    `json:"vfs"` // Mellanox virtual functions found
	// RDMAInPods counts the attached VFs (of any vendor) whose RDMA device
	// lives in their pod's netns (CheckRDMANetns); with Options.StateDir.
	RDMAInPods int       `json:"rdmaInPods"`
	Findings   []Finding `json:"findings"`
}

// Count returns the number of findings of a severity.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// run carries one doctor run's inputs and collects its findings.
type run struct {
	opts     Options
	sys      sysfs.Reader
	inv      *inventory
	links    []hostLink // this netns's links, for names and altnames
	rawLinks []netlink.Link
	linkErr  error
	// netdevsElsewhere: sysfs lists VF netdevs this netns does not have
	// (sysfs was mounted in another netns), so altnames cannot be judged.
	netdevsElsewhere bool
	findings         []Finding
}

func (r *run) add(sev Severity, check, subject, remedy, format string, a ...any) {
	r.findings = append(r.findings, Finding{
		Severity: sev, Check: check, Subject: subject, Message: fmt.Sprintf(format, a...), Remedy: remedy,
	})
}

// Run checks the node. It fails only when sysfs itself cannot be read or
// the options are invalid; everything wrong with the node is a finding.
func Run(opts Options) (*Report, error) {
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = config.DefaultSysfsRoot
	}
	if opts.AltName == "" {
		opts.AltName = config.DefaultAltName
	}
	if err := validateOptions(opts); err != nil {
		return nil, err
	}
	r := &run{opts: opts, sys: sysfs.Reader{Root: opts.SysfsRoot}, findings: []Finding{}}
	if err := r.sys.Readable(); err != nil {
		return nil, fmt.Errorf("cannot check this node: %w", err)
	}
	inv, err := scan(r.sys)
	if err != nil {
		return nil, err
	}
	r.inv = inv
	for _, e := range inv.readErrors {
		r.add(SeverityError, CheckSysfs, e.subject, "check the device with lspci -vvv -s "+e.subject+" and the kernel log; a half-probed device often needs a driver rebind or a reboot",
			"%v", e.err)
	}
	if len(inv.pfs) == 0 && len(inv.vfs) == 0 {
		r.add(SeverityInfo, CheckDevices, "node", "",
			"no Mellanox (vendor 0x15b3) PCI devices under %s/bus/pci/devices: nothing to check", opts.SysfsRoot)
	} else {
		r.listLinks()
		r.checkDriver()
		r.checkKernelLog()
		r.checkFirmware()
		r.checkPorts()
		r.checkGUIDs()
		r.checkNumVFs()
		r.checkNames()
	}
	if opts.Spec != nil {
		if r.links == nil && r.linkErr == nil {
			// The spec names netdevs even on a node without Mellanox devices.
			r.listLinks()
		}
		r.checkSpec()
	}
	inPods := 0
	if opts.StateDir != "" {
		if r.links == nil && r.linkErr == nil {
			r.listLinks() // free VFs of any vendor
		}
		inPods = r.checkLeftovers()
	}
	sortFindings(r.findings)
	return &Report{SysfsRoot: opts.SysfsRoot, PFs: len(inv.pfs), VFs: len(inv.vfs), RDMAInPods: inPods, Findings: r.findings}, nil
}

func validateOptions(opts Options) error {
	switch opts.LinkLayer {
	case "", config.LinkLayerAuto, config.LinkLayerInfiniBand, config.LinkLayerEthernet:
	default:
		return fmt.Errorf("link layer %q is not one of infiniband, ethernet, auto", opts.LinkLayer)
	}
	if opts.ExpectVFs < 0 {
		return fmt.Errorf("expected VF count %d is negative", opts.ExpectVFs)
	}
	if err := config.ValidateAltNameTemplate(opts.AltName); err != nil {
		return fmt.Errorf("alt-name template: %w", err)
	}
	return nil
}

func sortFindings(fs []Finding) { finding.Sort(fs) }
