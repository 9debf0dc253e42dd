package doctor

import (
	"fmt"
	"slices"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// PortChecks are the checks Ports runs: those whose answer can change from
// one second to the next (a cable pulled, a subnet manager gone, a port
// type flipped, a carrier lost) and that make a VF unusable for the next
// pod.
var PortChecks = []string{finding.CheckPortState, finding.CheckLinkLayer, finding.CheckCarrier}

// portSteps are the rows of the doctor's table that report port checks
// alone, in the table's order.
var portSteps = slices.DeleteFunc(slices.Clone(steps), func(s step) bool {
	return slices.ContainsFunc(s.reports, func(c string) bool { return !slices.Contains(PortChecks, c) })
})

// PortReport is one run of the port checks alone.
type PortReport struct {
	// Started is when the run began reading sysfs: a full report begun
	// later knows better.
	Started  time.Time
	Findings []finding.Finding
	// Functions are the PCI functions whose ports were read; a finding of
	// PortChecks about any other subject is not this report's to replace.
	Functions []string
}

// Ports runs the port checks (PortChecks) over every function with an RDMA
// device, as Run does, and nothing else: what the agent runs again each
// time a port attribute or a host link's carrier changes between two full
// runs, so a free VF whose port goes down is known in about a second
// rather than at the next full run. Like Run, it reads the links of the
// calling thread's network namespace. A
// function whose sysfs entry cannot be read is left out of Functions: the
// full run's finding about it stands.
func Ports(opts Options) (*PortReport, error) {
	opts, err := opts.checked()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	r := &run{opts: opts, sys: sysfs.Reader{Root: opts.SysfsRoot}, findings: []finding.Finding{}}
	inv, err := scan(r.sys)
	if err != nil {
		return nil, fmt.Errorf("port checks: %w", err)
	}
	r.inv = inv
	r.runSteps(portSteps)
	p := &PortReport{Started: started, Findings: r.findings}
	for _, f := range slices.Concat(inv.pfs, inv.vfs, inv.otherPFs, inv.otherVFs) {
		p.Functions = append(p.Functions, f.addr)
	}
	slices.Sort(p.Functions)
	return p, nil
}

// WithPorts returns the report with the findings of the port checks about
// p's functions replaced by p's, when p began after the report's run did
// (started); otherwise the report itself. The report is not changed.
func (rep *Report) WithPorts(started time.Time, p *PortReport) *Report {
	if p == nil || !p.Started.After(started) {
		return rep
	}
	covered := map[string]bool{"node": true} // what could not be checked at all
	for _, f := range p.Functions {
		covered[f] = true
	}
	out := *rep
	out.Findings = slices.DeleteFunc(slices.Clone(rep.Findings), func(f finding.Finding) bool {
		return slices.Contains(PortChecks, f.Check) && covered[f.Subject]
	})
	out.Findings = append(out.Findings, p.Findings...)
	sortFindings(out.Findings)
	return &out
}
