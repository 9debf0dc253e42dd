package install

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const commandUsage = `usage: sriov-stable-cni install --cni-bin-dir DIR [--name NAME] [--wait]

Copies this binary into DIR atomically (temporary file, fsync, rename), after
running the copy with CNI_COMMAND=VERSION to prove it works. An identical
binary already in DIR is left untouched. With --wait it then blocks until
SIGTERM or SIGINT, so an installer DaemonSet pod stays up; the binary stays
installed when it stops, because attached pods still need it for DEL.

Flags:
`

// Run is the `sriov-stable-cni install` command: it installs the running
// executable and reports on stdout, errors on stderr. versions are the CNI
// versions this build supports; the installed copy must report them. It
// returns the process exit code: 0 done, 1 install failed, 2 bad usage.
func Run(args []string, stdout, stderr io.Writer, versions []string) int {
	fl := flag.NewFlagSet("sriov-stable-cni install", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), commandUsage)
		fl.PrintDefaults()
	}
	dir := fl.String("cni-bin-dir", "", "the CNI bin directory to install into, e.g. /host/opt/cni/bin (required)")
	name := fl.String("name", DefaultName, "file name to install as: the plugin type network configurations use")
	wait := fl.Bool("wait", false, "after installing, block until SIGTERM or SIGINT")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fl.SetOutput(stdout)
			fl.Usage()
			return 0
		}
		return 2
	}
	switch {
	case fl.NArg() > 0:
		fmt.Fprintf(stderr, "sriov-stable-cni install: unexpected argument %q\n", fl.Arg(0))
		return 2
	case *dir == "":
		fmt.Fprintln(stderr, "sriov-stable-cni install: --cni-bin-dir is required")
		return 2
	}
	if err := ValidateName(*name); err != nil {
		fmt.Fprintf(stderr, "sriov-stable-cni install: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-cni install: locate the running binary: %v\n", err)
		return 1
	}
	res, err := Install(ctx, Options{Source: self, Dir: *dir, Name: *name, Versions: versions})
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-cni install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "sriov-stable-cni install: %s %s (%d bytes, sha256 %s, CNI versions %s)\n",
		res.Action, res.Path, res.Size, res.SHA256, strings.Join(res.Versions, ", "))
	if !*wait {
		return 0
	}
	fmt.Fprintln(stdout, "sriov-stable-cni install: waiting for SIGTERM or SIGINT")
	<-ctx.Done()
	fmt.Fprintln(stdout, "sriov-stable-cni install: signal received, exiting; the binary stays installed")
	return 0
}
