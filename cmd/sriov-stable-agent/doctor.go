package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

const doctorUsage = `usage: sriov-stable-agent doctor [flags]

Checks this node for the known root causes of broken SR-IOV InfiniBand
attachments: mlx5_core not loaded or not bound, a driver built for another
kernel, old firmware, ports fallen back to Ethernet or not ACTIVE, zero,
all-F or duplicate GUIDs, missing VFs, unstable VF names, missing altnames;
with --spec, also everything hostconfig --check compares with the node's spec.
It only reads: sysfs, the kernel log and the host's links.

One line per finding: severity, check, subject, message and remedy; with
--json a JSON report; with --npd one line of at most --npd-max-output bytes
for node-problem-detector's custom plugin monitor
(deploy/node-problem-detector), which reads the exit status as: 0 healthy,
1 problem, anything else unknown.
Exit status: 0 no errors (warnings may be present), 1 errors found,
2 bad flags or sysfs not readable.
`

// runDoctor is `sriov-stable-agent doctor`.
func runDoctor(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent doctor", doctorUsage, stdout, stderr)
	sysfsRoot := c.Flags.String("sysfs-root", config.DefaultSysfsRoot, "where the host's sysfs is mounted")
	asJSON := c.Flags.Bool("json", false, "print the report as JSON")
	npd := c.Flags.Bool("npd", false, "print one summary line for node-problem-detector (see --npd-max-output)")
	npdMax := c.Flags.Int("npd-max-output", 80, "with --npd, the longest line to print: the monitor config's max_output_length")
	stateDir := c.Flags.String("state-dir", config.DefaultStateDir, "the plugin's stateDir: host VFs no attachment record claims are checked for names a pod left on them (\"\" skips that check)")
	expect := addDoctorFlags(c.Flags, "")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	if *asJSON && *npd {
		return c.Fail(cmdline.ExitUsage, "--json and --npd exclude each other")
	}
	if *npdMax < 1 {
		return c.Fail(cmdline.ExitUsage, "--npd-max-output %d must be positive", *npdMax)
	}
	opts, err := expect.options(*sysfsRoot)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	opts.StateDir = *stateDir
	rep, err := doctor.Run(opts)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	switch {
	case *npd:
		_, err = fmt.Fprintln(stdout, rep.NPDSummary(*npdMax))
	case *asJSON:
		out := struct {
			*doctor.Report
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
			Info     int `json:"info"`
		}{rep, rep.Count(doctor.SeverityError), rep.Count(doctor.SeverityWarning), rep.Count(doctor.SeverityInfo)}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(out)
	default:
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "write report: %v", err)
	}
	if rep.Count(doctor.SeverityError) > 0 {
		return cmdline.ExitFailure
	}
	return cmdline.ExitOK
}

// doctorFlags are the doctor's expectations of the node, flags of both the
// doctor and the monitor (which runs the doctor).
type doctorFlags struct {
	kmsg, linkLayer, altName, namePattern, spec, linkDir *string
	expectVFs                                            *int
}

// addDoctorFlags defines the doctor's flags on fs, their help prefixed with
// prefix.
func addDoctorFlags(fs *flag.FlagSet, prefix string) *doctorFlags {
	return &doctorFlags{
		kmsg:      fs.String("kmsg", "/dev/kmsg", prefix+"kernel log: /dev/kmsg, or a file of dmesg output; \"\" skips the kernel log checks"),
		expectVFs: fs.Int("expect-vfs", 0, prefix+"VFs every Mellanox PF should have (0: no expectation)"),
		linkLayer: fs.String("link-layer", config.LinkLayerAuto, prefix+"expected link layer of every port: infiniband, ethernet or auto (none)"),
		altName:   fs.String("alt-name", config.DefaultAltName, prefix+"the plugin's altName template ({pci}, {pf}, {vf}) host VF netdevs should carry"),
		spec:      fs.String("spec", "", prefix+"the node's hostconfig spec (node.yaml): also compare the node with it, as hostconfig --check does"),
		linkDir:   fs.String("link-dir", "/etc/systemd/network", prefix+"where hostconfig's .link files are installed: the host names of free VFs"),
		namePattern: fs.String("name-pattern", "", prefix+"regular expression every host VF netdev name must match "+
			"(default: report kernel-assigned and pod names only)"),
	}
}

// options turns the parsed flags into the doctor's options for the sysfs
// at sysfsRoot, reading the spec file if one is named.
func (f *doctorFlags) options(sysfsRoot string) (doctor.Options, error) {
	opts := doctor.Options{
		SysfsRoot: sysfsRoot,
		KernelLog: *f.kmsg,
		ExpectVFs: *f.expectVFs,
		LinkLayer: *f.linkLayer,
		AltName:   *f.altName,
		LinkDir:   *f.linkDir,
	}
	if *f.namePattern != "" {
		re, err := regexp.Compile(*f.namePattern)
		if err != nil {
			return doctor.Options{}, fmt.Errorf("--name-pattern: %w", err)
		}
		opts.NamePattern = re
	}
	if *f.spec != "" {
		spec, err := hostconfig.ReadSpec(*f.spec)
		if err != nil {
			return doctor.Options{}, err
		}
		opts.Spec = spec
	}
	return opts, nil
}
