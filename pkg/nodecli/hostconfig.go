package nodecli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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

Flags:
`

// Hostconfig runs `sriov-stable-agent hostconfig` with args (after the
// command name): it generates a node's files or checks the node, and returns
// the process exit code.
func Hostconfig(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("sriov-stable-agent hostconfig", flag.ContinueOnError)
	fl.SetOutput(stderr)
	specPath := fl.String("spec", "", "the node spec (YAML)")
	out := fl.String("out", "", "write the files under this directory (it mirrors /)")
	check := fl.Bool("check", false, "compare the node with the spec instead of writing files")
	sysfsRoot := fl.String("sysfs-root", "", "read PFs from this sysfs (default for --check: /sys)")
	asJSON := fl.Bool("json", false, "with --check: print the findings as JSON")
	fl.Usage = func() {
		fmt.Fprint(stderr, hostconfigUsage)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fl.NArg() > 0:
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: unexpected argument %q\n", fl.Arg(0))
		return 2
	case *specPath == "":
		fmt.Fprintln(stderr, "sriov-stable-agent hostconfig: --spec is required")
		return 2
	case *check == (*out != ""):
		fmt.Fprintln(stderr, "sriov-stable-agent hostconfig: give either --out DIR or --check")
		return 2
	case *asJSON && !*check:
		fmt.Fprintln(stderr, "sriov-stable-agent hostconfig: --json goes with --check")
		return 2
	}
	data, err := os.ReadFile(*specPath)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: read spec: %v\n", err)
		return 1
	}
	spec, err := hostconfig.ParseSpec(data)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %s: %v\n", *specPath, err)
		return 1
	}
	if *check {
		root := *sysfsRoot
		if root == "" {
			root = "/sys"
		}
		return hostconfigCheck(spec, root, *asJSON, stdout, stderr)
	}
	return hostconfigGenerate(spec, *specPath, *sysfsRoot, *out, stdout, stderr)
}

func hostconfigGenerate(spec *hostconfig.Spec, specPath, sysfsRoot, out string, stdout, stderr io.Writer) int {
	plan, err := hostconfig.Resolve(spec, sysfsRoot)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %v\n", err)
		return 1
	}
	files, err := hostconfig.Render(plan)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %v\n", err)
		return 1
	}
	if err := hostconfig.WriteFiles(out, files); err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %v\n", err)
		return 1
	}
	links := 0
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".link") {
			links++
		}
	}
	fmt.Fprintf(stdout, "wrote %d files for %d PFs and %d VFs under %s:\n", len(files), len(plan.PFs), plan.VFCount(), out)
	fmt.Fprintf(stdout, "  %s/10-sriov-stable-*.link (%d)\n", filepath.Join(out, hostconfig.LinkDir), links)
	fmt.Fprintf(stdout, "  %s\n", filepath.Join(out, hostconfig.UnitDir, hostconfig.UnitName))
	fmt.Fprintf(stdout, "  %s\n", filepath.Join(out, spec.ScriptPath))
	fmt.Fprintf(stdout, "install on the node:\n")
	fmt.Fprintf(stdout, "  rm -f /%s/10-sriov-stable-*.link    # files of an earlier generation\n", hostconfig.LinkDir)
	fmt.Fprintf(stdout, "  cp -r %s/. /\n", out)
	fmt.Fprintf(stdout, "  update-initramfs -u    # the initramfs's udev names devices too (dracut -f elsewhere)\n")
	fmt.Fprintf(stdout, "  systemctl daemon-reload && systemctl enable --now %s\n", hostconfig.UnitName)
	fmt.Fprintf(stdout, "then: sriov-stable-agent hostconfig --spec %s --check\n", specPath)
	return 0
}

func hostconfigCheck(spec *hostconfig.Spec, root string, asJSON bool, stdout, stderr io.Writer) int {
	c := hostconfig.Checker{SysfsRoot: root}
	if filepath.Clean(root) == "/sys" {
		// Our sysfs and our netns are the host's: altnames can be read.
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: altnames not checked: open netlink: %v\n", err)
		} else {
			defer h.Close()
			c.AltNames = func(ifname string) ([]string, error) { return altNames(h, ifname) }
		}
	}
	findings, err := c.Check(spec)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %v\n", err)
		return 1
	}
	if asJSON {
		if findings == nil {
			findings = []hostconfig.Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(findings); err != nil {
			fmt.Fprintf(stderr, "sriov-stable-agent hostconfig: %v\n", err)
			return 1
		}
	} else {
		for _, f := range findings {
			fmt.Fprintln(stdout, f)
		}
		errs, warns := 0, 0
		for _, f := range findings {
			switch f.Severity {
			case hostconfig.SeverityError:
				errs++
			case hostconfig.SeverityWarning:
				warns++
			}
		}
		if errs+warns == 0 {
			fmt.Fprintln(stdout, "ok: the node matches the spec")
		} else {
			fmt.Fprintf(stdout, "%d error(s), %d warning(s)\n", errs, warns)
		}
	}
	if hostconfig.HasErrors(findings) {
		return 1
	}
	return 0
}

// altNames reads a link's altnames.
// Equivalent to: ip -o link show dev $ifname (the "altname" fields).
func altNames(h *netlink.Handle, ifname string) ([]string, error) {
	link, err := h.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("look up link %s: %w", ifname, err)
	}
	return link.Attrs().AltNames, nil
}
