package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/install"
)

const installUsage = `usage: sriov-stable-agent install --dir DIR

Copies this binary into DIR as sriov-stable-agent, atomically (temporary
file, fsync, rename), after running the copy with "version" to prove it
works. An identical binary already there is left untouched. The image has
no shell: node-problem-detector's init container uses this to take the
doctor into NPD's pod (deploy/node-problem-detector).
`

// runInstall is `sriov-stable-agent install`.
func runInstall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent install", installUsage, stdout, stderr)
	dir := c.Flags.String("dir", "", "the directory to install into (required)")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	if *dir == "" {
		return c.Fail(cmdline.ExitUsage, "--dir is required")
	}
	self, err := os.Executable()
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "locate the running binary: %v", err)
	}
	res, err := install.Install(ctx, install.Options{Source: self, Dir: *dir, Name: "sriov-stable-agent",
		Verify: install.VersionLine(versionLine())})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	fmt.Fprintf(stdout, "sriov-stable-agent install: %s %s (%d bytes, sha256 %s)\n", res.Action, res.Path, res.Size, res.SHA256)
	return cmdline.ExitOK
}

// versionLine is the first line `sriov-stable-agent version` prints.
func versionLine() string { return "sriov-stable-agent " + buildinfo.Version }
