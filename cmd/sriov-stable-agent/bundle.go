package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/bundle"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

const bundleUsage = `usage: sriov-stable-agent bundle -o FILE.tar.gz [flags]

Collects this node's SR-IOV state into one gzip'd tar for a support case
(docs/support-bundle.md): the agent's version and the kernel's, the doctor's
report, sysfs of every Mellanox and SR-IOV PCI function (GUIDs, port state,
link layer, driver, VF counts), the host's links and RDMA devices through
netlink, the plugin's attachment records and mirrored fabric verdict, the
.link files, the agent's /metrics and the ends of the log files named. It
only reads, reads nothing it is not pointed at (no credentials, no
environment), and stays under --max-size. What it could not collect is
listed in MANIFEST.json and on stderr; the bundle is written anyway.

-o - writes the bundle to standard output, so that from a workstation:
  kubectl exec -n sriov-stable-cni ds/sriov-stable-cni -c monitor -- \
    sriov-stable-agent bundle -o - > node.tar.gz
Exit status: 0 written, 1 not written, 2 bad flags.
`

func runBundle(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent bundle", bundleUsage, stdout, stderr)
	fs := c.Flags
	out := fs.String("o", "", "the bundle's file (written whole or not at all), or - for standard output (required)")
	sysfsRoot := fs.String("sysfs-root", config.DefaultSysfsRoot, "where the host's sysfs is mounted")
	stateDir := fs.String("state-dir", config.DefaultStateDir, "the plugin's stateDir (\"\" leaves the records out)")
	metricsURL := fs.String("metrics-url", "http://127.0.0.1:9808/metrics", "the agent's /metrics (\"\" leaves them out)")
	maxSize := fs.Int64("max-size", bundle.DefaultMaxBytes, "the most bytes of content the bundle holds, before compression")
	var logs []string
	fs.Func("log", "a log file whose last MiB goes in (the plugin's logFile, a container log under /var/log/pods); repeatable", func(s string) error {
		logs = append(logs, s)
		return nil
	})
	expect := addDoctorFlags(fs, "doctor: ")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	if *out == "" {
		return c.Fail(cmdline.ExitUsage, "-o FILE (or -o - for standard output) is required")
	}
	if *maxSize <= 0 {
		return c.Fail(cmdline.ExitUsage, "--max-size %d must be positive", *maxSize)
	}
	dopts, err := expect.options(*sysfsRoot)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	dopts.StateDir = *stateDir
	opts := bundle.Options{SysfsRoot: *sysfsRoot, StateDir: *stateDir, LinkDir: *expect.linkDir, MetricsURL: *metricsURL,
		Logs: logs, Doctor: &dopts, Netlink: true, MaxBytes: *maxSize}
	man, err := writeBundle(ctx, *out, stdout, opts)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	for _, p := range man.Problems {
		fmt.Fprintf(stderr, "sriov-stable-agent bundle: not collected: %s\n", p)
	}
	where := *out
	if where == "-" {
		where = "standard output"
	}
	fmt.Fprintf(stderr, "sriov-stable-agent bundle: %d files written to %s (%d not collected: MANIFEST.json lists them)\n",
		len(man.Entries), where, len(man.Problems))
	return cmdline.ExitOK
}

// writeBundle writes the bundle to out: a temporary file beside it renamed
// over it once complete, or stdout for "-".
func writeBundle(ctx context.Context, out string, stdout io.Writer, opts bundle.Options) (*bundle.Manifest, error) {
	if out == "-" {
		return bundle.Write(ctx, stdout, opts)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return nil, fmt.Errorf("create the bundle: %w", err)
	}
	defer os.Remove(f.Name()) // gone once renamed
	man, err := bundle.Write(ctx, f, opts)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), out)
	}
	if err != nil {
		return man, fmt.Errorf("write the bundle %s: %w", out, err)
	}
	return man, nil
}
