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
// setups; info says what could not be checked. The checks are finding's
// registry; steps (checks.go) says which the doctor runs and how.
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
	// altnames a pod left on them (vf-leftover).
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
	// lives in their pod's netns (rdma-netns); with Options.StateDir.
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
	byName   map[string]*hostLink   // links by name
	byAlt    map[string]*hostLink   // links by altname
	byParent map[string][]*hostLink // links by parent PCI device
	// netdevsElsewhere: sysfs lists VF netdevs this netns does not have
	// (sysfs was mounted in another netns), so altnames cannot be judged.
	netdevsElsewhere bool
	inPods           int // attached VFs with their RDMA device in their pod's netns
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
	opts, err := opts.checked()
	if err != nil {
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
	r.runSteps(steps)
	return &Report{SysfsRoot: opts.SysfsRoot, PFs: len(inv.pfs), VFs: len(inv.vfs), RDMAInPods: r.inPods, Findings: r.findings}, nil
}

// runSteps runs each of the steps whose inputs the options give, listing
// the links once for the first that reads them, and sorts the findings.
func (r *run) runSteps(steps []step) {
	have := r.opts.inputs()
	for _, s := range steps {
		needs := s.needs()
		if !have.Has(needs) || s.mellanox && len(r.inv.pfs)+len(r.inv.vfs) == 0 {
			continue
		}
		if needs.Has(finding.NeedLinks) && r.links == nil && r.linkErr == nil {
			r.listLinks()
		}
		s.run(r)
	}
	sortFindings(r.findings)
}

// inputs says what the options give the checks to read: sysfs and the
// host's links always, the kernel log, the spec and the state directory
// when set.
func (opts Options) inputs() finding.Needs {
	n := finding.NeedSysfs | finding.NeedLinks
	if opts.KernelLog != "" {
		n |= finding.NeedKernelLog
	}
	if opts.Spec != nil {
		n |= finding.NeedSpec
	}
	if opts.StateDir != "" {
		n |= finding.NeedStateDir
	}
	return n
}

// checked is opts with the defaults filled in, or why they are invalid.
func (opts Options) checked() (Options, error) {
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = config.DefaultSysfsRoot
	}
	if opts.AltName == "" {
		opts.AltName = config.DefaultAltName
	}
	switch opts.LinkLayer {
	case "", config.LinkLayerAuto, config.LinkLayerInfiniBand, config.LinkLayerEthernet:
	default:
		return opts, fmt.Errorf("link layer %q is not one of infiniband, ethernet, auto", opts.LinkLayer)
	}
	if opts.ExpectVFs < 0 {
		return opts, fmt.Errorf("expected VF count %d is negative", opts.ExpectVFs)
	}
	if err := config.ValidateAltNameTemplate(opts.AltName); err != nil {
		return opts, fmt.Errorf("alt-name template: %w", err)
	}
	return opts, nil
}

func sortFindings(fs []Finding) { finding.Sort(fs) }
