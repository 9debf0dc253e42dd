package main

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The markers of the doc's block the figures replace.
const (
	blockBegin = "<!-- fleet-bench:begin -->"
	blockEnd   = "<!-- fleet-bench:end -->"
)

// The targets, judged at the largest fleet.
const (
	targetVerdict  = 5 * time.Second  // duplicate → both statuses and Events; removed → cleared (p99)
	targetCold     = 60 * time.Second // cold start → complete index
	targetTakeover = 20 * time.Second // takeover → verdicts complete
	targetRSS      = 256 << 20        // controller peak RSS
)

type results struct {
	started    time.Time
	kubernetes string
	vfsPerNode int
	scales     []*scaleResult
}

type scaleResult struct {
	nodes, vfs  int
	publish     time.Duration // the fleet grown to this size
	index       time.Duration // both replicas' indexes complete, from their start
	verdicts    time.Duration // every status current, from the start
	startWrites int           // status writes the leader made at the start
	findings    int
	detect      []time.Duration
	clear       []time.Duration
	rss, peak   int64 // the larger replica's, after the injections
	replicas    []*replica

	idleMeasured bool
	idleWrites   map[string]int // API writes served while idle, by resource
	idleRenewals int            // of the leases' writes: the replicas' Lease renewals
	idleSeen     counts         // the same, as watches saw them

	copyMeasured   bool
	copyFound      time.Duration // a node copying another's GUIDs → every VF of both found, with Events
	copyCleared    time.Duration
	copyReport     string // fabric report's summary line meanwhile
	copyReportTook time.Duration
	cleanReport    string // and once cleared

	takeoverMeasured bool
	takeover         time.Duration // leader killed → the other holds the Lease
	afterTakeover    time.Duration // → the duplicate injected meanwhile in both statuses with Events
	takeoverClear    time.Duration
	takeoverWrites   int // status writes of the new leader for it
	flaps            int // status writes on nodes the duplicate is not on
}

// percentile is the nearest-rank p-th percentile: the smallest sample
// with at least p of them at or below it (with 50 samples, the 99th is
// the slowest).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(k, 0)]
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// top is the largest fleet measured.
func (r *results) top() *scaleResult {
	if len(r.scales) == 0 {
		return nil
	}
	return r.scales[len(r.scales)-1]
}

// checks are the targets at the largest fleet, each with what was
// measured and whether it holds.
func (r *results) checks() []check {
	s := r.top()
	if s == nil {
		return nil
	}
	p99d, p99c := percentile(s.detect, 0.99), percentile(s.clear, 0.99)
	cs := []check{
		{fmt.Sprintf("duplicate injected → in both nodes' status and an Event on each: p99 of %d (nearest rank) %s ≤ %s", len(s.detect), sec(p99d), sec(targetVerdict)), len(s.detect) > 0 && p99d <= targetVerdict},
		{fmt.Sprintf("duplicate removed → cleared in both statuses with Events: p99 of %d %s ≤ %s", len(s.clear), sec(p99c), sec(targetVerdict)), len(s.clear) > 0 && p99c <= targetVerdict},
		{fmt.Sprintf("cold start → both replicas' indexes complete (%d VFs): %s ≤ %s", s.vfs, sec(s.index), sec(targetCold)), s.index > 0 && s.index <= targetCold},
		{fmt.Sprintf("controller RSS at %d VFs: peak (VmHWM) of the larger replica %s ≤ %s", s.vfs, mib(s.peak), mib(targetRSS)), s.peak > 0 && s.peak <= targetRSS},
	}
	if s.copyMeasured {
		want := fmt.Sprintf("%d conflicts over %d nodes, %d VFs", 2*r.vfsPerNode, s.nodes, s.vfs)
		cs = append(cs, check{fmt.Sprintf("a node copying another's GUIDs: every VF of both found with Events in %s ≤ %s, cleared in %s; fabric report: %q", sec(s.copyFound), sec(targetVerdict), sec(s.copyCleared), s.copyReport),
			s.copyFound <= targetVerdict && s.copyCleared <= targetVerdict && strings.HasPrefix(s.copyReport, want)})
	} else {
		cs = append(cs, check{"a node copying another's GUIDs: not measured", false})
	}
	if s.idleMeasured {
		ledger := s.idleWrites["nodevfsets"] + s.idleWrites["nodevfsets/status"] + s.idleWrites["events"] + s.idleSeen.statuses + s.idleSeen.specs + s.idleSeen.events
		cs = append(cs, check{fmt.Sprintf("writes of NodeVFSets and Events while idle: %d", ledger), ledger == 0})
	} else {
		cs = append(cs, check{"idle writes: not measured", false})
	}
	if s.takeoverMeasured {
		cs = append(cs, check{fmt.Sprintf("leader killed → the other replica's verdict on a duplicate injected meanwhile, after it took the Lease: %s ≤ %s", sec(s.afterTakeover), sec(targetTakeover)), s.afterTakeover <= targetTakeover},
			check{fmt.Sprintf("findings flapping in the takeover (status writes on nodes it did not touch): %d", s.flaps), s.flaps == 0})
	} else {
		cs = append(cs, check{"takeover: not measured", false})
	}
	return cs
}

type check struct {
	what string
	met  bool
}

func (r *results) missed() []string {
	var out []string
	for _, c := range r.checks() {
		if !c.met {
			out = append(out, c.what)
		}
	}
	return out
}

// markdown is the doc's block: the command, the table of every fleet
// size, the largest fleet's idle and takeover figures, and the targets.
func (r *results) markdown(o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Figures of one run: `%s` at %s, %s, %d CPUs, Kubernetes %s and etcd built from modules (integration/cluster/versions.env),\n",
		o.command, o.version, r.started.UTC().Format("2006-01-02"), runtime.NumCPU(), r.kubernetes)
	fmt.Fprintf(&b, "%d VFs per node, %d duplicates injected and removed at each size, seed %d.\n\n", r.vfsPerNode, o.injections, o.seed)
	b.WriteString("| nodes | VFs | published in | cold start: both indexes complete | every status current (leader's writes) | duplicate → both statuses + Events p50 / p99 / max | removed → cleared p50 / p99 / max | controller RSS / peak |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, s := range r.scales {
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s (%d) | %s / %s / %s | %s / %s / %s | %s / %s |\n", s.nodes, s.vfs, sec(s.publish), sec(s.index), sec(s.verdicts), s.startWrites,
			sec(percentile(s.detect, 0.5)), sec(percentile(s.detect, 0.99)), sec(percentile(s.detect, 1)),
			sec(percentile(s.clear, 0.5)), sec(percentile(s.clear, 0.99)), sec(percentile(s.clear, 1)), mib(s.rss), mib(s.peak))
	}
	if s := r.top(); s != nil && s.copyMeasured {
		fmt.Fprintf(&b, "\nA node copying another's node and port GUIDs onto all its %d VFs at %d nodes: every VF of both in both statuses with Events %s later; `sriov-stable-agent fabric report` (%s) then printed %q and exited 1;\n",
			r.vfsPerNode, s.nodes, sec(s.copyFound), sec(s.copyReportTook), s.copyReport)
		fmt.Fprintf(&b, "its own GUIDs back, both cleared %s later, and the report printed %q (exit 0).\n", sec(s.copyCleared), s.cleanReport)
	}
	if s := r.top(); s != nil && s.idleMeasured {
		fmt.Fprintf(&b, "\nIdle for %s at %d nodes, the API server's write requests served (apiserver_request_total, by resource): %s;\n", o.idle, s.nodes, formatWrites(s.idleWrites))
		fmt.Fprintf(&b, "of the leases' writes, %d were the replicas' Lease renewals (the election's heartbeat, every 2 s), the rest the API server's own.\n", s.idleRenewals)
		fmt.Fprintf(&b, "Seen by watches meanwhile: %d status changes, %d spec changes, %d Events.\n", s.idleSeen.statuses, s.idleSeen.specs, s.idleSeen.events)
	}
	if s := r.top(); s != nil && s.takeoverMeasured {
		fmt.Fprintf(&b, "\nLeader killed (SIGKILL, no release) at %d nodes: the other replica held the Lease %s later (the lease's 15 s duration ran out);\n", s.nodes, sec(s.takeover))
		fmt.Fprintf(&b, "a duplicate injected right after the kill was in both statuses with Events %s after the takeover (%d status writes by the new leader for the duplicate and its removal), cleared %s after its removal;\n", sec(s.afterTakeover), s.takeoverWrites, sec(s.takeoverClear))
		fmt.Fprintf(&b, "%d status writes on the other %d nodes meanwhile.\n", s.flaps, s.nodes-2)
	}
	b.WriteString("\nTargets at the largest fleet:\n")
	for _, c := range r.checks() {
		mark := "met"
		if !c.met {
			mark = "**MISSED**"
		}
		fmt.Fprintf(&b, "- %s: %s\n", c.what, mark)
	}
	return b.String()
}

func formatWrites(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, w[k]))
	}
	return strings.Join(parts, ", ")
}

var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

// writesByResource sums apiserver_request_total's samples of every verb
// but the reads, by resource[/subresource].
func writesByResource(metrics string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.SplitSeq(metrics, "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(line[:end], -1) {
			labels[m[1]] = m[2]
		}
		switch labels["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT", "":
			continue
		}
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(line[end+1:]), &v); err != nil {
			continue
		}
		key := labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += v
	}
	return out
}

// writeBlock replaces the text between the markers of file with text.
func writeBlock(file, text string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	i, j := bytes.Index(b, []byte(blockBegin)), bytes.Index(b, []byte(blockEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s block to write the figures into", file, blockBegin, blockEnd)
	}
	var out bytes.Buffer
	out.Write(b[:i+len(blockBegin)])
	out.WriteString("\n" + text)
	out.Write(b[j:])
	return os.WriteFile(file, out.Bytes(), 0o644)
}
