package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

const hostconfigUsage = `usage:
  sriov-stable-agent hostconfig --spec node.yaml --out DIR [--sysfs-root /sys]
  sriov-stable-agent hostconfig --spec node.yaml --check [--sysfs-root /sys] [--json]
  sriov-stable-agent hostconfig apply --spec FILE [--sysfs-root /sys] [--wait 60s]

Generates what an SR-IOV node needs before kubelet starts, from one spec:
one systemd .link file per VF and PF (stable Name= and AlternativeName=,
matched by PCI path), a oneshot unit ordered before kubelet that runs
"hostconfig apply", and the spec it applies (etc/sriov-stable/node.yaml,
resolved to PCI addresses). DIR mirrors the node's root: install with
"cp -r DIR/. /", and the agent with "sriov-stable-agent install --dir
/usr/local/bin".

With --sysfs-root the PFs are read from that sysfs (match rules, VF
addresses); without it every PF must be listed by pci with vfOffset and
vfStride. --check compares the node with the spec and exits 1 on errors.
"apply" brings the node to the spec (see "hostconfig apply --help").
Exit status: 0 done (or no errors found), 1 failed (or errors found),
2 bad flags.
`

const hostconfigApplyUsage = `usage: sriov-stable-agent hostconfig apply --spec FILE [--sysfs-root /sys] [--wait 60s]

Brings the node to the spec, what the boot unit runs before kubelet: waits
for the PFs, creates the VFs (sriov_numvfs), gives InfiniBand VFs the GUIDs
derived from their PF's, names VFs and PFs and adds their altnames where
udev has not, then checks the node as --check does. Only what differs is
changed, so a second run changes nothing. Changes and problems are logged
on stderr; the findings and a count go to stdout. Each wait is bounded by
--wait (default: the spec's waitSeconds). With a --sysfs-root other than
/sys nothing is renamed and no GUID is set (those are this network
namespace's links), and udev is not waited for.
Exit status: 0 the node matches the spec, 1 a problem or an error finding,
2 bad flags.
`

// runHostconfig is `sriov-stable-agent hostconfig`: it generates a node's
// files or checks the node; `hostconfig apply` applies a spec.
func runHostconfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "apply" {
		return runHostconfigApply(ctx, args[1:], stdout, stderr)
	}
	c := cmdline.New("sriov-stable-agent hostconfig", hostconfigUsage, stdout, stderr)
	specPath := c.Flags.String("spec", "", "the node spec (YAML)")
	out := c.Flags.String("out", "", "write the files under this directory (it mirrors /)")
	check := c.Flags.Bool("check", false, "compare the node with the spec instead of writing files")
	sysfsRoot := c.Flags.String("sysfs-root", "", "read PFs from this sysfs (default for --check: /sys)")
	asJSON := c.Flags.Bool("json", false, "with --check: print the findings as JSON")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	switch {
	case *specPath == "":
		return c.Fail(cmdline.ExitUsage, "--spec is required")
	case *check == (*out != ""):
		return c.Fail(cmdline.ExitUsage, "give either --out DIR or --check")
	case *asJSON && !*check:
		return c.Fail(cmdline.ExitUsage, "--json goes with --check")
	}
	spec, err := readSpec(c, *specPath)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	if *check {
		root := *sysfsRoot
		if root == "" {
			root = "/sys"
		}
		return hostconfigCheck(c, spec, root, *asJSON)
	}
	return hostconfigGenerate(c, spec, *sysfsRoot, *out)
}

func hostconfigGenerate(c *cmdline.Command, spec *hostconfig.Spec, sysfsRoot, out string) int {
	plan, err := hostconfig.Resolve(spec, sysfsRoot)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	files, err := hostconfig.Render(plan)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	if err := hostconfig.WriteFiles(out, files); err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	links := 0
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".link") {
			links++
		}
	}
	w := c.Stdout
	fmt.Fprintf(w, "wrote %d files for %d PFs and %d VFs under %s:\n", len(files), len(plan.PFs), plan.VFCount(), out)
	fmt.Fprintf(w, "  %s/10-sriov-stable-*.link (%d)\n", filepath.Join(out, hostconfig.LinkDir), links)
	fmt.Fprintf(w, "  %s\n", filepath.Join(out, hostconfig.UnitDir, hostconfig.UnitName))
	fmt.Fprintf(w, "  %s    # the spec the unit applies\n", filepath.Join(out, hostconfig.SpecPath))
	fmt.Fprintf(w, "install on the node:\n")
	fmt.Fprintf(w, "  sriov-stable-agent install --dir %s    # the unit runs %s\n", filepath.Dir(hostconfig.AgentPath), hostconfig.AgentPath)
	fmt.Fprintf(w, "  rm -f /%s/10-sriov-stable-*.link    # files of an earlier generation\n", hostconfig.LinkDir)
	fmt.Fprintf(w, "  cp -r %s/. /\n", out)
	fmt.Fprintf(w, "  update-initramfs -u    # the initramfs's udev names devices too (dracut -f elsewhere)\n")
	fmt.Fprintf(w, "  systemctl daemon-reload && systemctl enable --now %s\n", hostconfig.UnitName)
	fmt.Fprintf(w, "then: sriov-stable-agent hostconfig --spec /%s --check\n", hostconfig.SpecPath)
	return cmdline.ExitOK
}

// readSpec reads the spec and warns on stderr about keys it ignores.
func readSpec(c *cmdline.Command, path string) (*hostconfig.Spec, error) {
	spec, err := hostconfig.ReadSpec(path)
	if err != nil {
		return nil, err
	}
	for _, note := range spec.Ignored() {
		fmt.Fprintf(c.Stderr, "%s: warning: %s: %s\n", c.Flags.Name(), path, note)
	}
	return spec, nil
}

// runHostconfigApply is `sriov-stable-agent hostconfig apply`: the boot
// unit's command.
func runHostconfigApply(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent hostconfig apply", hostconfigApplyUsage, stdout, stderr)
	specPath := c.Flags.String("spec", "", "the spec to apply (the unit's: /"+hostconfig.SpecPath+")")
	sysfsRoot := c.Flags.String("sysfs-root", "/sys", "the node's sysfs")
	wait := c.Flags.Duration("wait", 0, "bound of each wait (default: the spec's waitSeconds)")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	switch {
	case *specPath == "":
		return c.Fail(cmdline.ExitUsage, "--spec is required")
	case *wait < 0:
		return c.Fail(cmdline.ExitUsage, "--wait %s is negative", *wait)
	}
	spec, err := readSpec(c, *specPath)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	// Our sysfs and our netns are the host's only at /sys: only there are
	// the netdevs sysfs names this namespace's links to rename.
	host := filepath.Clean(*sysfsRoot) == "/sys"
	res, err := hostconfig.Apply(ctx, spec, hostconfig.ApplyOptions{
		SysfsRoot: *sysfsRoot, Wait: *wait, Netlink: host, Udev: host,
		Log: slog.New(slog.NewTextHandler(stderr, nil)),
	})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	fmt.Fprintf(c.Stdout, "%d change(s), %d problem(s)\n", len(res.Changes), len(res.Problems))
	printFindings(c, res.Findings)
	if !res.OK() {
		return cmdline.ExitFailure
	}
	return cmdline.ExitOK
}

func hostconfigCheck(c *cmdline.Command, spec *hostconfig.Spec, root string, asJSON bool) int {
	chk := hostconfig.Checker{SysfsRoot: root}
	if filepath.Clean(root) == "/sys" {
		// Our sysfs and our netns are the host's: altnames can be read.
		chk.AltNames = hostconfig.HostAltNames
	}
	findings, err := chk.Check(spec)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	if asJSON {
		if findings == nil {
			findings = []hostconfig.Finding{}
		}
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(findings); err != nil {
			return c.Fail(cmdline.ExitFailure, "%v", err)
		}
	} else {
		printFindings(c, findings)
	}
	if hostconfig.HasErrors(findings) {
		return cmdline.ExitFailure
	}
	return cmdline.ExitOK
}

// printFindings prints one finding per line and a count, or that the node
// matches.
func printFindings(c *cmdline.Command, findings []hostconfig.Finding) {
	errs, warns := 0, 0
	for _, f := range findings {
		fmt.Fprintln(c.Stdout, f)
		switch f.Severity {
		case hostconfig.SeverityError:
			errs++
		case hostconfig.SeverityWarning:
			warns++
		}
	}
	if errs+warns == 0 {
		fmt.Fprintln(c.Stdout, "ok: the node matches the spec")
	} else {
		fmt.Fprintf(c.Stdout, "%d error(s), %d warning(s)\n", errs, warns)
	}
}
