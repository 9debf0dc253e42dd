package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

const hostconfigUsage = `usage:
  sriov-stable-agent hostconfig --spec node.yaml --out DIR [--sysfs-root /sys]
  sriov-stable-agent hostconfig --spec node.yaml --check [--sysfs-root /sys] [--json]

Generates what an SR-IOV node needs before kubelet starts, from one spec:
one systemd .link file per VF and PF (stable Name= and AlternativeName=,
matched by PCI path), a oneshot unit ordered before kubelet, and the script
it runs (create VFs, assign fabric-unique InfiniBand GUIDs, verify). DIR
mirrors the node's root: install with "cp -r DIR/. /".

With --sysfs-root the PFs are read from that sysfs (match rules, VF
addresses); without it every PF must be listed by pci with vfOffset and
vfStride. --check compares the node with the spec and exits 1 on errors.
Exit status: 0 done (or no errors found), 1 failed (or errors found),
2 bad flags.
`

// runHostconfig is `sriov-stable-agent hostconfig`: it generates a node's
// files or checks the node.
func runHostconfig(_ context.Context, args []string, stdout, stderr io.Writer) int {
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
	spec, err := hostconfig.ReadSpec(*specPath)
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
	return hostconfigGenerate(c, spec, *specPath, *sysfsRoot, *out)
}

func hostconfigGenerate(c *cmdline.Command, spec *hostconfig.Spec, specPath, sysfsRoot, out string) int {
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
	fmt.Fprintf(w, "  %s\n", filepath.Join(out, spec.ScriptPath))
	fmt.Fprintf(w, "install on the node:\n")
	fmt.Fprintf(w, "  rm -f /%s/10-sriov-stable-*.link    # files of an earlier generation\n", hostconfig.LinkDir)
	fmt.Fprintf(w, "  cp -r %s/. /\n", out)
	fmt.Fprintf(w, "  update-initramfs -u    # the initramfs's udev names devices too (dracut -f elsewhere)\n")
	fmt.Fprintf(w, "  systemctl daemon-reload && systemctl enable --now %s\n", hostconfig.UnitName)
	fmt.Fprintf(w, "then: sriov-stable-agent hostconfig --spec %s --check\n", specPath)
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
	if hostconfig.HasErrors(findings) {
		return cmdline.ExitFailure
	}
	return cmdline.ExitOK
}
