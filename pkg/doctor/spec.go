package doctor

import (
	"fmt"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

// checkSpec compares the node with its hostconfig spec and merges the
// findings. Where the doctor already reported the same check about the same
// subject, its own finding stands; the spec adds what only it can know (the
// names, counts, addresses and GUIDs it prescribes).
func (r *run) checkSpec() {
	chk := hostconfig.Checker{SysfsRoot: r.sys.Root}
	// Altnames only where the doctor could read them itself; otherwise it
	// has said why once, as info, and the spec check leaves them alone.
	if r.linkErr == nil && !r.netdevsElsewhere {
		chk.AltNames = func(name string) ([]string, error) {
			l, ok := r.byName[name]
			if !ok {
				return nil, fmt.Errorf("netdev %s is not in this network namespace", name)
			}
			return l.altNames, nil
		}
	}
	found, err := chk.Check(r.opts.Spec)
	if err != nil {
		r.add(SeverityError, finding.CheckSpec, "node", "fix the spec's pfs entries for this node, or check the node against its own spec",
			"the node cannot be compared with its hostconfig spec: %v", err)
		return
	}
	have := map[[2]string]bool{}
	for _, f := range r.findings {
		have[[2]string{f.Check, f.Subject}] = true
	}
	var notChecked []hostconfig.Finding
	for _, f := range found {
		switch {
		case have[[2]string{f.Check, f.Subject}]:
		case f.Severity == hostconfig.SeverityInfo:
			notChecked = append(notChecked, f) // one line for all, below
		default:
			r.add(f.Severity, f.Check, f.Subject, f.Remedy, "%s", f.Message)
		}
	}
	if len(notChecked) > 0 {
		first := notChecked[0]
		r.add(SeverityInfo, finding.CheckSpec, "node", "",
			"%d items of the hostconfig spec not checked, such as %s: %s", len(notChecked), first.Subject, first.Message)
	}
}
