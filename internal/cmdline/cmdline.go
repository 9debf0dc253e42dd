// Package cmdline is the one shape of both binaries' by-hand commands: a
// dispatcher over subcommands, and for each subcommand a flag.FlagSet that
// continues on error, one usage printer, and the same exit codes. Output goes
// to stdout, errors to stderr.
//
// It is linked into the CNI binary, so it uses the standard library only.
package cmdline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit codes of every command of both binaries.
const (
	ExitOK      = 0 // done
	ExitFailure = 1 // the command ran and failed (or, for a check, found errors)
	ExitUsage   = 2 // the command line is wrong; nothing was done
)

// Func runs one subcommand with the arguments after its name and returns
// the process exit code.
type Func func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Main runs the subcommand args[0] of program. Without arguments it prints
// usage on stderr (exit 2); "help", "--help" and "-h" print it on stdout.
func Main(ctx context.Context, program, usage string, commands map[string]Func, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr, usage, nil)
		return ExitUsage
	}
	switch args[0] {
	case "help", "--help", "-h":
		printUsage(stdout, usage, nil)
		return ExitOK
	}
	run, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", program, args[0])
		printUsage(stderr, usage, nil)
		return ExitUsage
	}
	return run(ctx, args[1:], stdout, stderr)
}

// Command is one subcommand being run: its flags, its usage text and where
// it writes.
type Command struct {
	// Flags are the subcommand's flags; define them before Parse.
	Flags  *flag.FlagSet
	Stdout io.Writer
	Stderr io.Writer
	name   string
	usage  string
}

// New starts the subcommand name, as the user types it ("sriov-stable-agent
// doctor"). usage is what --help prints above the list of flags.
func New(name, usage string, stdout, stderr io.Writer) *Command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Parse's caller reports errors and usage itself, on the right stream.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Command{Flags: fs, Stdout: stdout, Stderr: stderr, name: name, usage: usage}
}

// Parse parses args, which must be flags only. When ok is false the command
// is done and returns code: --help printed the usage on stdout (0), or
// stderr says what is wrong with the command line (2).
func (c *Command) Parse(args []string) (code int, ok bool) {
	err := c.Flags.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(c.Stdout, c.usage, c.Flags)
		return ExitOK, false
	case err != nil:
		fmt.Fprintf(c.Stderr, "%s: %v\nrun \"%s --help\" for the flags\n", c.name, err, c.name)
		return ExitUsage, false
	case c.Flags.NArg() > 0:
		return c.Fail(ExitUsage, "unexpected argument %q", c.Flags.Arg(0)), false
	}
	return ExitOK, true
}

// Fail prints "name: message" on stderr and returns code.
func (c *Command) Fail(code int, format string, a ...any) int {
	fmt.Fprintf(c.Stderr, "%s: %s\n", c.name, fmt.Sprintf(format, a...))
	return code
}

// printUsage prints a usage text and, when fs has any, its flags.
func printUsage(w io.Writer, usage string, fs *flag.FlagSet) {
	fmt.Fprint(w, usage)
	if fs == nil {
		return
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}
