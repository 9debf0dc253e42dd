// Package cli is the by-hand command line of the sriov-stable-cni binary,
// used when it runs without CNI_COMMAND: version, help and install. The
// operator's node commands (doctor, hostconfig) live in sriov-stable-agent:
// every package linked into this binary costs every pod attach.
package cli

import (
	"fmt"
	"io"
	"strings"

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

// Main runs the CLI with args (without the program name) and returns the
// process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		printVersion(stdout)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "install":
		return runInstall(args[1:], stdout, stderr)
	case "doctor", "hostconfig":
		// Commands this binary once had: say where they went.
		fmt.Fprintf(stderr, "sriov-stable-cni: %[1]s moved to sriov-stable-agent: run \"sriov-stable-agent %[1]s\" (same image, same flags); "+
			"this binary runs on every pod attach and is kept lean\n", args[0])
		return 2
	}
	fmt.Fprintf(stderr, "sriov-stable-cni: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func printVersion(w io.Writer) {
	fmt.Fprintf(w, "sriov-stable-cni %s\ncommit: %s\nCNI versions: %s\n",
		buildinfo.Version, buildinfo.Commit, strings.Join(plugin.Versions.SupportedVersions(), ", "))
}
