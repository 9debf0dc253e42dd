// Command bench measures what sriov-stable-cni costs a pod start, beside the
// peers in the same run (issue 7). In private namespaces, with veth
// stand-ins for VFs and a DGX H200 fixture sysfs, it runs the chains
// [host-device], [host-device, tuning], [host-device, noop-chained] (the
// floor: a Go plugin that only parses and passes prevResult through) and
// [host-device, sriov-stable-cni] through libcni, interleaved round by
// round, then 32 parallel ADDs, VERSION execs and binary sizes. It prints a
// Markdown table and exits 1 when a target is missed or a chain fails, 2
// when it cannot start.
//
// Timings are not tests: `make bench` runs it, `make test` does not.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

type options struct {
	binDir         string
	rounds         int
	warmup         int
	parallel       int
	parallelRounds int
	versionRuns    int
	rssRuns        int
	neighbors      int
	diskDir        string
	baseline       string
	cniVersion     string
	tuning         string
	seed           uint64
	// The drift monitor section (drift.go).
	drift, driftOnly bool
	driftAttachments int
	driftFree        int
	driftChanges     int
	driftIdle        time.Duration
	driftSweep       time.Duration
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.binDir, "bin-dir", "bin", "directory with sriov-stable-cni, host-device, tuning and noop-chained")
	flag.IntVar(&o.rounds, "rounds", 200, "measured interleaved rounds (each runs ADD, CHECK, DEL of every chain)")
	flag.IntVar(&o.warmup, "warmup", 10, "unmeasured rounds first")
	flag.IntVar(&o.parallel, "parallel", 32, "ADDs started at once on distinct stand-ins")
	flag.IntVar(&o.parallelRounds, "parallel-rounds", 5, "times the parallel ADD burst is repeated")
	flag.IntVar(&o.versionRuns, "version-runs", 200, "VERSION execs per binary")
	flag.IntVar(&o.rssRuns, "rss-runs", 5, "ADDs per chain with the plugin under ptrace for its peak RSS (not timed)")
	flag.StringVar(&o.diskDir, "disk-dir", "/var/tmp", "where libcni's cache, our log file and the bin dir go: a disk-backed directory, as /var/lib/cni is")
	flag.IntVar(&o.neighbors, "neighbors", 7, "records of other live attachments in our state dir, as on a node whose other VFs are in use")
	flag.StringVar(&o.cniVersion, "cni-version", "1.1.0", "cniVersion of the chains (CHECK needs 0.4.0 or later)")
	flag.StringVar(&o.tuning, "tuning", "realistic", `tuning's configuration: "realistic" (sets mtu and a sysctl) or "empty"`)
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the interleaving order")
	flag.StringVar(&o.baseline, "baseline", "", "another sriov-stable-cni binary (say, before a change) to run as a fifth chain, for an A/B in the same run (make bench BASELINE=FILE)")
	flag.BoolVar(&o.drift, "drift", true, "also measure the drift monitor agent (bin-dir needs sriov-stable-agent)")
	flag.BoolVar(&o.driftOnly, "drift-only", false, "measure only the drift monitor agent")
	flag.IntVar(&o.driftAttachments, "drift-attachments", 64, "attachments the drift monitor watches")
	flag.IntVar(&o.driftFree, "drift-free", 64, "free VFs (with an RDMA device, no pod) the agent's node checks and port watcher watch beside them")
	flag.IntVar(&o.driftChanges, "drift-changes", 240, "renames, altname removals and carrier drops made one at a time (and one RDMA port drop per attachment)")
	flag.DurationVar(&o.driftIdle, "drift-idle", time.Minute, "how long the agent's idle CPU is measured")
	flag.DurationVar(&o.driftSweep, "drift-sweep", 30*time.Second, "the sweep interval of the comparison with events off")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	if o.tuning != "realistic" && o.tuning != "empty" {
		fmt.Fprintf(os.Stderr, "bench: -tuning must be realistic or empty, not %q\n", o.tuning)
		os.Exit(2)
	}
	code, parent, err := harness.Reexec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	if parent {
		os.Exit(code)
	}
	// The plugin's log and libcni's cache go to -disk-dir, wherever it is.
	testutil.AllowRoots(o.diskDir)
	if o.binDir, err = filepath.Abs(o.binDir); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	tb := harness.NewProgramTB()
	o.binDir = installBinaries(tb, o)
	r := run(tb, o)
	tb.Close()
	r.print(os.Stdout)
	if !r.passed() {
		os.Exit(1)
	}
}

// run does every measurement and returns what the report needs.
func run(tb *harness.ProgramTB, o options) *report {
	r := &report{opts: o, machine: describeMachine(o.diskDir)}
	if !o.driftOnly {
		runChains(tb, o, r)
	}
	if o.drift || o.driftOnly {
		r.drift = driftSection(tb, o)
	}
	r.machine.loadAfter = loadAvg()
	return r
}

// runChains measures the chains: serial rounds, bursts, VERSION execs, sizes.
func runChains(tb *harness.ProgramTB, o options, r *report) {
	n := newNode(tb, o)
	tb.Logf("bench: %d interleaved rounds (+%d warm-up)", o.rounds, o.warmup)
	r.serial = serialRounds(tb, n, o)
	tb.Logf("bench: %d × %d parallel ADDs of 4 chains", o.parallelRounds, o.parallel)
	r.parallel = parallelBursts(tb, n, o)
	tb.Logf("bench: %d VERSION execs per binary", o.versionRuns)
	r.version = versionExecs(tb, o, benchBinaries(o))
	r.sizes = binarySizes(tb, o.binDir, benchBinaries(o))
}

// installBinaries copies the plugins of -bin-dir (and the -baseline binary
// under the type ourBaseline) into a fresh bin dir under -disk-dir, each
// written with write(2) as an installer (ours, a package manager) leaves
// them in /opt/cni/bin. The Go linker writes its output through a shared
// mapping, and on this kernel such a file execs some 0.2–0.3 ms slower
// than a written copy of it: measured from the build directory, a plugin
// would pay for how it was built, not for what it does.
func installBinaries(tb *harness.ProgramTB, o options) string {
	dir, err := os.MkdirTemp(o.diskDir, "sriov-stable-bench-bin-")
	if err != nil {
		tb.Fatalf("bin dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := map[string]string{}
	names := []string{ours, tuning, floor, hostDevice}
	switch {
	case o.driftOnly:
		names = []string{ours, hostDevice, agent}
	case o.drift:
		names = append(names, agent)
	}
	for _, name := range names {
		src[name] = filepath.Join(o.binDir, name)
	}
	if o.baseline != "" {
		src[ourBaseline] = o.baseline
	}
	for name, from := range src {
		writeCopy(tb, from, filepath.Join(dir, name))
	}
	return dir
}

// writeCopy writes the bytes of from into a new executable to, with
// write(2).
func writeCopy(tb *harness.ProgramTB, from, to string) {
	data, err := os.ReadFile(from)
	if err != nil {
		tb.Fatalf("copy %s: %v", from, err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		tb.Fatalf("copy %s: %v", from, err)
	}
}
