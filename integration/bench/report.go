package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// report is every measurement of one run and the targets judged on them.
type report struct {
	opts     options
	machine  machine
	serial   *serialResult // nil with -drift-only
	parallel []*parallelResult
	drift    *driftResult // nil with -drift=false
	version  map[string][]time.Duration
	sizes    map[string]int64
}

// target is one of the bench's goals with what this run measured.
type target struct {
	name     string
	measured string
	ok       bool
}

// chainOverhead is the per-round difference of a chain's wall time and the
// host-device-alone chain's in the same round.
func (r *report) chainOverhead(name, verb string) []time.Duration {
	return diffs(r.serial.get(name).times[verb], r.serial.get("host-device").times[verb])
}

// overhead is what the chain's second plugin adds to it: its own process's
// wall time as libcni ran it. The chains are otherwise identical, so this is
// the chain overhead without host-device's noise in it.
func (r *report) overhead(name, verb string) []time.Duration {
	return walls(r.serial.get(name).execs[verb])
}

func (r *report) parallelOf(name string) *parallelResult {
	for _, p := range r.parallel {
		if p.name == name {
			return p
		}
	}
	return &parallelResult{name: name}
}

// targets are issue 15's: our overhead within 1.15× tuning's and 1.4× the
// floor's for ADD and CHECK, and under a 32-way burst no failure and a
// chain p99 within 1.1× that of host-device alone; and issue 23's: the
// exclusive-mode search within 1 ms and, given -baseline, shared mode's
// ADD not slower than the baseline's beyond the interval. RTNL serializes the moves into the
// pod netns, so the burst is judged against the chain without us, not
// against the serial median. A bound holds when the upper end of the
// figure's 90% confidence interval is within it, not its point estimate.
func (r *report) targets() []target {
	var ts []target
	if r.drift != nil {
		ts = r.drift.targets()
	}
	if r.serial == nil {
		return ts
	}
	for _, verb := range []string{"ADD", "CHECK"} {
		for _, peer := range []struct {
			name, what string
			bound      float64
		}{{"tuning", "tuning's", 1.15}, {"floor", "the floor's", 1.4}} {
			_, hi := ratioCI(r.overhead("ours", verb), r.overhead(peer.name, verb), r.opts.seed)
			ts = append(ts, target{fmt.Sprintf("%s overhead ≤ %g× %s", verb, peer.bound, peer.what), r.cmpCI(verb, peer.name),
				hi > 0 && hi <= peer.bound})
		}
	}
	excl, plain := r.overhead("ours-exclusive", "ADD"), r.overhead("ours-plain", "ADD")
	lo, hi := diffCI(excl, plain, r.opts.seed)
	ts = append(ts, target{"the exclusive-mode search adds ≤ 1 ms to ADD (upper end of the 90% CI)",
		fmt.Sprintf("%s ms (90%% CI %s–%s)", ms(median(excl)-median(plain)), ms(lo), ms(hi)), len(excl) > 0 && hi <= time.Millisecond})
	if r.opts.baseline != "" {
		lo, hi := ratioCI(r.overhead("ours", "ADD"), r.overhead("baseline", "ADD"), r.opts.seed)
		ts = append(ts, target{"shared-mode ADD unchanged from -baseline (the 90% CI of ours ÷ baseline reaches 1.00 or lies below it)",
			fmt.Sprintf("%s; 90%% CI %.2f–%.2f×", cmpText(median(r.overhead("ours", "ADD")), median(r.overhead("baseline", "ADD"))), lo, hi),
			hi > 0 && lo <= 1})
	}
	p, hd := r.parallelOf("ours"), r.parallelOf("host-device")
	p99, hdP99 := quantile(p.addLatency, 0.99), quantile(hd.addLatency, 0.99)
	complete := len(p.addLatency) > 0 && len(hd.addLatency) > 0
	blo, bhi := quantileRatioCI(p.addLatency, hd.addLatency, 0.99, r.opts.seed)
	return append(ts,
		target{fmt.Sprintf("%d parallel ADDs: 0 failures", r.opts.parallel), fmt.Sprintf("%d ADD, %d DEL", p.addFails, p.delFails),
			p.addFails+p.delFails == 0 && complete},
		target{"burst p99 of [host-device, ours] ≤ 1.1× [host-device]'s",
			fmt.Sprintf("%s; 90%% CI %.2f–%.2f×", cmpText(p99, hdP99), blo, bhi), complete && bhi > 0 && bhi <= 1.1},
	)
}

// cmpCI is cmpText of our overhead against a peer's for one verb, with the
// ratio's 90% confidence interval over the run's rounds.
func (r *report) cmpCI(verb, peer string) string {
	a, b := r.overhead("ours", verb), r.overhead(peer, verb)
	lo, hi := ratioCI(a, b, r.opts.seed)
	return fmt.Sprintf("%s; 90%% CI %.2f–%.2f×", cmpText(median(a), median(b)), lo, hi)
}

func cmpText(a, b time.Duration) string {
	return fmt.Sprintf("%s (%s vs %s ms)", times(ratio(a, b)), ms(a), ms(b))
}

func (r *report) passed() bool {
	return !slices.ContainsFunc(r.targets(), func(t target) bool { return !t.ok })
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func p50p90(ds []time.Duration) string { return ms(median(ds)) + " / " + ms(quantile(ds, 0.9)) }

func (r *report) print(w io.Writer) {
	m := r.machine
	fmt.Fprintf(w, "## sriov-stable-cni bench\n\n")
	fmt.Fprintf(w, "%s; %d × %s; kernel %s; load average %s before, %s after.  \n", m.date, m.cpus, m.cpuModel, m.kernel, m.loadBefore, m.loadAfter)
	if r.serial != nil {
		r.printChains(w)
	}
	if r.drift != nil {
		r.drift.print(w)
	}
	r.printTargets(w)
}

// printChains prints the chains' sections.
func (r *report) printChains(w io.Writer) {
	o, m := r.opts, r.machine
	tuningDesc := "realistic: `mtu` 4092 and one sysctl (`net.ipv4.conf.IFNAME.arp_notify`), its backup in a tmpfs `dataDir`"
	if o.tuning == "empty" {
		tuningDesc = "empty: no `mtu`, no sysctl"
	}
	fmt.Fprintf(w, "cniVersion %s; %d interleaved rounds (+%d warm-up); tuning %s; our state dir (with %d neighbour records), the fixture sysfs and tuning's dataDir on tmpfs, "+
		"as /run and /sys are; libcni's cache and our log file on %s (%s); every plugin runs from a copy written into a bin dir there, as an installer leaves it.\n\n",
		o.cniVersion, o.rounds, o.warmup, tuningDesc, o.neighbors, o.diskDir, m.diskFS)

	fmt.Fprintf(w, "### Overhead: the added plugin's own process, as libcni ran it in the chain (wall ms, p50 / p90)\n\n")
	fmt.Fprintf(w, "| verb | host-device | tuning | floor | ours | ours ÷ tuning | ours ÷ floor |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, verb := range verbs {
		tun, fl, ou := r.overhead("tuning", verb), r.overhead("floor", verb), r.overhead("ours", verb)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", verb, p50p90(walls(r.serial.get("host-device").hd[verb])),
			p50p90(tun), p50p90(fl), p50p90(ou), times(ratio(median(ou), median(tun))), times(ratio(median(ou), median(fl))))
	}
	if o.baseline != "" {
		fmt.Fprintf(w, "\n-baseline %s, same configuration as ours (wall ms, p50 / p90; ours ÷ baseline):", o.baseline)
		for _, verb := range verbs {
			b := r.overhead("baseline", verb)
			lo, hi := ratioCI(r.overhead("ours", verb), b, r.opts.seed)
			fmt.Fprintf(w, " %s %s (%s, 90%% CI %.2f–%.2f×)", verb, p50p90(b), times(ratio(median(r.overhead("ours", verb)), median(b))), lo, hi)
		}
		fmt.Fprintf(w, "; ADD CPU p50 %s ms.\n", ms(median(cpus(r.serial.get("baseline").execs["ADD"]))))
	}
	scan, tun := r.overhead("ours-scan", "ADD"), r.overhead("tuning", "ADD")
	fmt.Fprintf(w, "\nOurs with no saved GUID index, so that ADD scans every RDMA device's GUID, as the first ADD after an RDMA device "+
		"changed does (not a target): ADD %s wall ms, %s tuning's, %s ours with the index; CPU p50 %s ms.\n",
		p50p90(scan), times(ratio(median(scan), median(tun))), times(ratio(median(scan), median(r.overhead("ours", "ADD")))),
		ms(median(cpus(r.serial.get("ours-scan").execs["ADD"]))))
	excl, plain := r.overhead("ours-exclusive", "ADD"), r.overhead("ours-plain", "ADD")
	lo, hi := diffCI(excl, plain, r.opts.seed)
	fmt.Fprintf(w, "\nThe exclusive-mode search: ours on a VF whose PF has an RDMA device and whose own is not in the host's sysfs "+
		"(RDMA netns exclusive mode moved it into the pod), so ADD searches the pod netns through a sysfs instance made there "+
		"(this host has no ib_core: RDMA netlink is not asked; the netns holds no device, guidPolicy ignore), against ours on a "+
		"VF nothing says has RDMA (no search), each over a fixture sysfs of its own: ADD %s vs %s wall ms, the search %s ms "+
		"(90%% CI %s–%s); CPU p50 %s vs %s ms.\n",
		p50p90(excl), p50p90(plain), ms(median(excl)-median(plain)), ms(lo), ms(hi),
		ms(median(cpus(r.serial.get("ours-exclusive").execs["ADD"]))), ms(median(cpus(r.serial.get("ours-plain").execs["ADD"]))))
	fmt.Fprintf(w, "\nCPU (user+system) of one ADD, p50: ")
	for i, name := range []string{"tuning", "floor", "ours"} {
		if i > 0 {
			fmt.Fprintf(w, ", ")
		}
		fmt.Fprintf(w, "%s %s ms", name, ms(median(cpus(r.serial.get(name).execs["ADD"]))))
	}
	fmt.Fprintf(w, ". Peak RSS of one ADD (VmHWM at exit, max of %d): ", o.rssRuns)
	for i, name := range []string{"tuning", "floor", "ours"} {
		if i > 0 {
			fmt.Fprintf(w, ", ")
		}
		fmt.Fprintf(w, "%s %.1f MiB", name, float64(maxRSS(r.serial.get(name).rss))/1024)
	}
	fmt.Fprintf(w, ".\n")

	fmt.Fprintf(w, "\n### Overhead over [host-device] alone, by chain (wall ms per round: chain − host-device chain, same round; p50 / p90)\n\n")
	fmt.Fprintf(w, "| verb | [host-device] chain | tuning | floor | ours | ours ÷ tuning | ours ÷ floor |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, verb := range verbs {
		tun, fl, ou := r.chainOverhead("tuning", verb), r.chainOverhead("floor", verb), r.chainOverhead("ours", verb)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", verb, p50p90(r.serial.get("host-device").times[verb]),
			p50p90(tun), p50p90(fl), p50p90(ou), times(ratio(median(ou), median(tun))), times(ratio(median(ou), median(fl))))
	}

	fmt.Fprintf(w, "\n### %d ADDs started at once on distinct stand-ins, %d bursts per chain (then a parallel DEL)\n\n", o.parallel, o.parallelRounds)
	fmt.Fprintf(w, "| chain | failures (ADD / DEL) | chain p50 / p99 | serial chain p50 | p99 ÷ serial | last plugin's process p50 / p99 | its CPU p50 |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range r.parallel {
		serial := median(r.serial.get(p.name).times["ADD"])
		pw := walls(p.execs)
		fmt.Fprintf(w, "| %s | %d / %d | %s / %s | %s | %s | %s / %s | %s |\n", chainName(p.second), p.addFails, p.delFails,
			ms(median(p.addLatency)), ms(quantile(p.addLatency, 0.99)), ms(serial), times(ratio(quantile(p.addLatency, 0.99), serial)),
			ms(median(pw)), ms(quantile(pw, 0.99)), ms(median(cpus(p.execs))))
		if p.firstErr != nil {
			defer fmt.Fprintf(w, "\nFirst failure (%s): %v\n", p.name, p.firstErr)
		}
	}

	fmt.Fprintf(w, "\n### VERSION exec (%d runs each from %d copies, interleaved) and binary size\n\n", o.versionRuns, versionCopies)
	fmt.Fprintf(w, "| binary | VERSION p50 | VERSION p90 | size |\n|---|--:|--:|--:|\n")
	for _, name := range benchBinaries(o) {
		fmt.Fprintf(w, "| %s | %s ms | %s ms | %.1f MiB |\n", name, ms(median(r.version[name])), ms(quantile(r.version[name], 0.9)),
			float64(r.sizes[name])/(1<<20))
	}

}

// printTargets prints the targets table and, with the chains, what bounds
// the parallel p99.
func (r *report) printTargets(w io.Writer) {
	fmt.Fprintf(w, "\n### Targets\n\n| target | measured | result |\n|---|---|---|\n")
	missed := 0
	for _, t := range r.targets() {
		res := "pass"
		if !t.ok {
			res, missed = "**MISSED**", missed+1
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.name, t.measured, res)
	}
	if missed == 0 {
		fmt.Fprintf(w, "\nAll targets met.\n")
	} else {
		fmt.Fprintf(w, "\n%d target(s) missed.\n", missed)
	}
	if r.serial != nil {
		r.parallelBounds(w)
	}
}

// parallelBounds prints what bounds the parallel p99 on this machine,
// whatever the plugin after host-device does: host-device's own ratio (the
// kernel moves netdevs between namespaces one at a time, under RTNL), and
// the time 2×N processes need on the machine's CPUs.
func (r *report) parallelBounds(w io.Writer) {
	hd, ours := r.parallelOf("host-device"), r.parallelOf("ours")
	serialHD, serialOurs := median(r.serial.get("host-device").times["ADD"]), median(r.serial.get("ours").times["ADD"])
	if len(hd.addLatency) == 0 || len(ours.addLatency) == 0 || serialHD <= 0 || serialOurs <= 0 {
		return
	}
	v := r.serial.get("ours")
	chainCPU := median(cpus(v.hd["ADD"])) + median(cpus(v.execs["ADD"]))
	cpuBound := time.Duration(r.opts.parallel) * chainCPU / time.Duration(runtime.NumCPU())
	fmt.Fprintf(w, "\nBounds on the parallel p99 here: [host-device] alone reaches %s its serial median; and %d chains of %s ms CPU "+
		"(host-device + ours, serial p50) on %d CPUs need %s ms before the last can end, %s the serial median.\n",
		times(ratio(quantile(hd.addLatency, 0.99), serialHD)), r.opts.parallel, ms(chainCPU), runtime.NumCPU(), ms(cpuBound),
		times(ratio(cpuBound, serialOurs)))
}

func chainName(second string) string {
	if second == "" {
		return "[host-device]"
	}
	return "[host-device, " + second + "]"
}

func times(f float64) string {
	if f == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", f)
}

func walls(es []execSample) []time.Duration {
	out := make([]time.Duration, len(es))
	for i, e := range es {
		out[i] = e.Wall
	}
	return out
}

func cpus(es []execSample) []time.Duration {
	out := make([]time.Duration, len(es))
	for i, e := range es {
		out[i] = e.CPU
	}
	return out
}

func maxRSS(es []execSample) int64 {
	var m int64
	for _, e := range es {
		m = max(m, e.MaxRSS)
	}
	return m
}
