// Command sriov-stable-agent is the node agent shipped next to the
// sriov-stable-cni plugin: `sriov-stable-agent monitor` re-checks every
// attachment for drift and runs the node doctor, serving Prometheus metrics;
// `doctor` and `hostconfig` are the operator's node commands. It is a
// separate binary so the CNI plugin, exec'd on every pod attach, carries
// neither client_golang nor the doctor, hostconfig and their YAML parser.
// One file per command; internal/cmdline gives them their shape.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
)

const usage = `sriov-stable-agent: node agent for sriov-stable-cni.

  sriov-stable-agent monitor [flags]      re-check attachments for drift, run the node doctor, serve /metrics
  sriov-stable-agent doctor [flags]       check this node for the known SR-IOV root causes
  sriov-stable-agent hostconfig [flags]   generate a node's boot setup (VFs, names, GUIDs), apply it, or check a node
  sriov-stable-agent fabric [flags]       the fabric controller: duplicate and invalid VF GUIDs across the cluster
  sriov-stable-agent fabric report        print every duplicate or invalid GUID with its holders
  sriov-stable-agent bundle -o FILE       collect this node's SR-IOV state for a support case
  sriov-stable-agent install --dir DIR    copy this binary into DIR (node-problem-detector's init container)
  sriov-stable-agent version              version and commit
  sriov-stable-agent help                 this text

Run "sriov-stable-agent COMMAND --help" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the agent's command line: args without the program name; it
// returns the process exit code. ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cmdline.Main(ctx, "sriov-stable-agent", usage, map[string]cmdline.Func{
		"monitor":    runMonitor,
		"doctor":     runDoctor,
		"hostconfig": runHostconfig,
		"fabric":     runFabric,
		"bundle":     runBundle,
		"install":    runInstall,
		"version":    runVersion,
		"--version":  runVersion,
	}, args, stdout, stderr)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent version", "usage: sriov-stable-agent version\n\nPrints the version and the commit.\n", stdout, stderr)
	if code, ok := c.Parse(args); !ok {
		return code
	}
	fmt.Fprintf(stdout, "%s\ncommit: %s\n", versionLine(), buildinfo.Commit)
	return cmdline.ExitOK
}
