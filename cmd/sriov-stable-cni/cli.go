package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

const usage = `sriov-stable-cni: a chained CNI plugin that finds an SR-IOV VF by PCI address
in the pod's network namespace, verifies it and repairs its name.

As a CNI plugin it is run by the container runtime with CNI_COMMAND set.
By hand:

  sriov-stable-cni version               version, commit and CNI versions
  sriov-stable-cni install ...           copy this binary into a CNI bin dir (installer)
  sriov-stable-cni help                  this text

Run "sriov-stable-cni install --help" for its flags. The node doctor and
hostconfig are commands of sriov-stable-agent, shipped in the same image:
"sriov-stable-agent doctor", "sriov-stable-agent hostconfig".
`

// run is the by-hand command line: args without the program name; it
// returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cmdline.Main(ctx, "sriov-stable-cni", usage, map[string]cmdline.Func{
		"version":    runVersion,
		"--version":  runVersion,
		"-v":         runVersion,
		"install":    runInstall,
		"doctor":     movedToAgent("doctor"),
		"hostconfig": movedToAgent("hostconfig"),
	}, args, stdout, stderr)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-cni version", "usage: sriov-stable-cni version\n\n"+
		"Prints the version, the commit and the CNI versions this build supports.\n", stdout, stderr)
	if code, ok := c.Parse(args); !ok {
		return code
	}
	fmt.Fprintf(stdout, "sriov-stable-cni %s\ncommit: %s\nCNI versions: %s\n",
		buildinfo.Version, buildinfo.Commit, strings.Join(plugin.Versions.SupportedVersions(), ", "))
	return cmdline.ExitOK
}

// movedToAgent answers a command this binary once had with one line saying
// where it went and why, not the usage text.
func movedToAgent(command string) cmdline.Func {
	return func(_ context.Context, _ []string, _, stderr io.Writer) int {
		fmt.Fprintf(stderr, "sriov-stable-cni: %[1]s moved to sriov-stable-agent: run \"sriov-stable-agent %[1]s\" (same image, same flags); "+
			"this binary runs on every pod attach and is kept lean\n", command)
		return cmdline.ExitUsage
	}
}
