package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/install"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

const installUsage = `usage: sriov-stable-cni install --cni-bin-dir DIR [--name NAME] [--wait]

Copies this binary into DIR atomically (temporary file, fsync, rename), after
running the copy with CNI_COMMAND=VERSION to prove it works. An identical
binary already in DIR is left untouched. With --wait it then blocks until
SIGTERM or SIGINT, so an installer DaemonSet pod stays up; the binary stays
installed when it stops, because attached pods still need it for DEL.
`

// runInstall is `sriov-stable-cni install`, the installer DaemonSet's
// command: it installs the running executable, which must then report the
// CNI versions this build supports. Exit 0 done, 1 install failed, 2 bad
// usage.
func runInstall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-cni install", installUsage, stdout, stderr)
	dir := c.Flags.String("cni-bin-dir", "", "the CNI bin directory to install into, e.g. /host/opt/cni/bin (required)")
	name := c.Flags.String("name", install.DefaultName, "file name to install as: the plugin type network configurations use")
	wait := c.Flags.Bool("wait", false, "after installing, block until SIGTERM or SIGINT")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	if *dir == "" {
		return c.Fail(cmdline.ExitUsage, "--cni-bin-dir is required")
	}
	if err := install.ValidateName(*name); err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}

	self, err := os.Executable()
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "locate the running binary: %v", err)
	}
	res, err := install.Install(ctx, install.Options{Source: self, Dir: *dir, Name: *name, Versions: plugin.Versions.SupportedVersions()})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	fmt.Fprintf(stdout, "sriov-stable-cni install: %s %s (%d bytes, sha256 %s, CNI versions %s)\n", res.Action, res.Path, res.Size, res.SHA256, strings.Join(res.Versions, ", "))
	if !*wait {
		return cmdline.ExitOK
	}
	fmt.Fprintln(stdout, "sriov-stable-cni install: waiting for SIGTERM or SIGINT")
	<-ctx.Done()
	fmt.Fprintln(stdout, "sriov-stable-cni install: signal received, exiting; the binary stays installed")
	return cmdline.ExitOK
}
