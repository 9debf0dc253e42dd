package doctor

import (
	"errors"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostvf"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// checkLeftovers (vf-leftover) reports the free VFs of this netns (no
// attachment record claims them) that carry a name or altnames a pod or the
// kernel left on them: the next ADD of such a VF, or host-device's return
// of another VF, can fail on them (sriov-cni #445, #250).
// It also runs checkRDMANetns over the records: the count is r.inPods.
func (r *run) checkLeftovers() {
	recs, err := state.NewStore(r.opts.StateDir).List()
	if err != nil && len(recs) == 0 && countJoined(err) == 0 {
		r.add(SeverityInfo, finding.CheckVFLeftover, "node", "run the doctor where the plugin's state directory is readable, with --state-dir",
			"free VFs not checked for leftover names: %v", err)
		return
	}
	if n := countJoined(err); n > 0 {
		r.add(SeverityWarning, finding.CheckVFLeftover, "node", "look at the files named: the plugin writes each record as a regular JSON file under 1 MiB; "+
			"move away what is not one (DEL and GC go on without it)",
			"%d attachment records in %s cannot be read, so the VFs they claim may be judged free: %v", n, r.opts.StateDir, err)
	}
	r.inPods = r.checkRDMANetns(recs)
	if r.linkErr != nil {
		return // checkNames said why the links cannot be read
	}
	found, notes, err := hostvf.FindLeftovers(hostvf.Input{
		SysfsRoot: r.sys.Root, AltName: r.opts.AltName, Records: recs, Links: r.rawLinks,
		Spec: r.opts.Spec, LinkDir: r.opts.LinkDir,
	})
	if err != nil {
		r.add(SeverityInfo, finding.CheckVFLeftover, "node", "", "free VFs not checked for leftover names: %v", err)
		return
	}
	for _, n := range notes {
		r.add(SeverityInfo, finding.CheckVFLeftover, "node", "", "%s", n)
	}
	for _, lo := range found {
		r.add(SeverityWarning, finding.CheckVFLeftover, lo.PCI, hostvf.Remedy(lo),
			"VF %s (PF %s VF %d) in this network namespace is free (no attachment record claims it) and %s: the next ADD of it, "+
				"or host-device moving another VF home, can fail on that", lo.PCI, lo.PF, lo.Index, lo.Problem)
	}
}

// countJoined counts the errors of an errors.Join, 0 for another error.
func countJoined(err error) int {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		return len(joined.Unwrap())
	}
	return 0
}
