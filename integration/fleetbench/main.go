// Command fleet-bench is make fleet-bench: the fabric ledger at fleet
// scale (docs/fabric.md, docs/performance.md). A real etcd and
// kube-apiserver (built from modules, as the cluster e2e's) in private
// namespaces; simulated DGX H200 nodes, 64 VFs each, publishing their
// NodeVFSets through the node agent's own publisher and client; two
// replicas of the real controller binary (sriov-stable-agent fabric).
// At each fleet size it measures the cold start, duplicates injected and
// removed, and the replicas' memory; at the largest, the idle API writes
// and a leader killed. It prints the figures, writes them into the doc's
// fleet-bench block (-doc) and exits 1 when a target is missed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

type options struct {
	bin, agent, crd, work, doc, command, version string
	scales                                       []int
	vfs, injections                              int
	idle                                         time.Duration
	seed                                         uint64
}

func parseFlags() (options, error) {
	var o options
	scales := flag.String("scales", "100,250,500,1000", "fleet sizes in nodes, comma separated, ascending; the targets are judged at the last")
	flag.StringVar(&o.bin, "bin", "", "directory with etcd and kube-apiserver (integration/cluster/build.sh DIR etcd kubernetes) (required)")
	flag.StringVar(&o.agent, "agent", "", "the sriov-stable-agent binary whose fabric command is measured (required)")
	flag.StringVar(&o.crd, "crd", "deploy/fabric/crd.yaml", "the NodeVFSet CRD")
	flag.StringVar(&o.work, "work", "", "this run's directory: the components' and replicas' logs (required)")
	flag.StringVar(&o.doc, "doc", "", "a file whose fleet-bench block (between "+blockBegin+" and "+blockEnd+") the figures replace")
	flag.StringVar(&o.command, "command", "make fleet-bench", "the command shown with the figures")
	flag.StringVar(&o.version, "version", "", "the tree's version (git describe), shown with the figures")
	flag.IntVar(&o.vfs, "vfs", 64, "VFs per node, a multiple of 8 (8 PFs)")
	flag.IntVar(&o.injections, "injections", 50, "duplicates injected and removed at each fleet size")
	flag.DurationVar(&o.idle, "idle", 5*time.Minute, "how long the largest fleet is left alone while its API writes are counted")
	flag.Uint64Var(&o.seed, "seed", 26, "seed of the injections' pairs")
	flag.Parse()
	var errs []error
	for name, v := range map[string]string{"bin": o.bin, "agent": o.agent, "work": o.work} {
		if v == "" {
			errs = append(errs, fmt.Errorf("-%s is required", name))
		}
	}
	for f := range strings.SplitSeq(*scales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			errs = append(errs, fmt.Errorf("-scales: %q is not a node count of at least 2", f))
			continue
		}
		o.scales = append(o.scales, n)
	}
	if !slices.IsSorted(o.scales) || len(o.scales) == 0 {
		errs = append(errs, fmt.Errorf("-scales %q: give ascending sizes", *scales))
	}
	if o.vfs <= 0 || o.vfs%pfsPerNode != 0 || o.vfs/pfsPerNode > 256 {
		errs = append(errs, fmt.Errorf("-vfs %d: give a multiple of %d up to %d", o.vfs, pfsPerNode, 256*pfsPerNode))
	}
	if o.injections < 1 {
		errs = append(errs, fmt.Errorf("-injections %d: give at least one", o.injections))
	}
	for _, p := range []*string{&o.bin, &o.agent, &o.crd, &o.work, &o.doc} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				errs = append(errs, err)
			}
			*p = abs
		}
	}
	return o, errors.Join(errs...)
}

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-bench: %v\n", err)
		os.Exit(2)
	}
	cfg := kubecluster.Config{BinDir: o.bin, WorkDir: o.work, Progress: os.Stdout}
	os.Exit(kubecluster.Run(cfg, func() int { return run(o, cfg) }))
}
