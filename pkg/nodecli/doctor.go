// Package nodecli holds the node commands of sriov-stable-agent: doctor and
// hostconfig. They live outside the CNI binary because every package linked
// into it is paid for on every pod attach.
package nodecli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

// Exit codes of the doctor command.
const (
	doctorExitOK       = 0 // no error findings (warnings and info may be present)
	doctorExitFindings = 1 // at least one error finding
	doctorExitUsage    = 2 // bad flags, or the node could not be checked at all
)

const doctorUsage = `usage: sriov-stable-agent doctor [flags]

Checks this node for the known root causes of broken SR-IOV InfiniBand
attachments: mlx5_core not loaded or not bound, a driver built for another
kernel, old firmware, ports fallen back to Ethernet or not ACTIVE, zero,
all-F or duplicate GUIDs, missing VFs, unstable VF names, missing altnames;
with --spec, also everything hostconfig --check compares with the node's spec.
It only reads: sysfs, the kernel log and the host's links.

One line per finding: severity, check, subject, message and remedy.
Exit status: 0 no errors (warnings may be present), 1 errors found,
2 bad flags or sysfs not readable.

Flags:
`

// Doctor runs `sriov-stable-agent doctor` with args (after the command
// name) and returns the process exit code.
func Doctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sriov-stable-agent doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sysfsRoot := fs.String("sysfs-root", config.DefaultSysfsRoot, "where the host's sysfs is mounted")
	kmsg := fs.String("kmsg", "/dev/kmsg", "kernel log: /dev/kmsg, or a file of dmesg output; \"\" skips the kernel log checks")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	expectVFs := fs.Int("expect-vfs", 0, "VFs every Mellanox PF should have (0: no expectation)")
	linkLayer := fs.String("link-layer", config.LinkLayerAuto, "expected link layer of every port: infiniband, ethernet or auto (none)")
	altName := fs.String("alt-name", config.DefaultAltName, "the plugin's altName template ({pci}, {pf}, {vf}) host VF netdevs should carry")
	specFile := fs.String("spec", "", "the node's hostconfig spec (node.yaml): also compare the node with it, as hostconfig --check does")
	namePattern := fs.String("name-pattern", "", "regular expression every host VF netdev name must match (default: report kernel-assigned and pod names only)")
	fs.Usage = func() {} // --help prints to stdout below; a bad flag gets a one-line hint
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, doctorUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return doctorExitOK
		}
		fmt.Fprintln(stderr, "run \"sriov-stable-agent doctor --help\" for the flags")
		return doctorExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sriov-stable-agent doctor: unexpected argument %q\n", fs.Arg(0))
		return doctorExitUsage
	}
	opts := doctor.Options{
		SysfsRoot: *sysfsRoot,
		KernelLog: *kmsg,
		ExpectVFs: *expectVFs,
		LinkLayer: *linkLayer,
		AltName:   *altName,
	}
	if *namePattern != "" {
		re, err := regexp.Compile(*namePattern)
		if err != nil {
			fmt.Fprintf(stderr, "sriov-stable-agent doctor: --name-pattern: %v\n", err)
			return doctorExitUsage
		}
		opts.NamePattern = re
	}
	if *specFile != "" {
		spec, err := ReadSpec(*specFile)
		if err != nil {
			fmt.Fprintf(stderr, "sriov-stable-agent doctor: %v\n", err)
			return doctorExitUsage
		}
		opts.Spec = spec
	}
	rep, err := doctor.Run(opts)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent doctor: %v\n", err)
		return doctorExitUsage
	}
	if *asJSON {
		out := struct {
			*doctor.Report
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
			Info     int `json:"info"`
		}{rep, rep.Count(doctor.SeverityError), rep.Count(doctor.SeverityWarning), rep.Count(doctor.SeverityInfo)}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(out)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent doctor: write report: %v\n", err)
		return doctorExitUsage
	}
	if rep.Count(doctor.SeverityError) > 0 {
		return doctorExitFindings
	}
	return doctorExitOK
}

// ReadSpec reads and validates a hostconfig spec file (the doctor's and the
// monitor's --spec).
func ReadSpec(path string) (*hostconfig.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read hostconfig spec: %w", err)
	}
	spec, err := hostconfig.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("hostconfig spec %s: %w", path, err)
	}
	return spec, nil
}
