package cmdline

import (
	"context"
	"io"
	"strings"
	"testing"
)

// command is a subcommand with one flag, as the binaries define theirs.
func command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := New("prog cmd", "usage: prog cmd [--n N]\n", stdout, stderr)
	n := c.Flags.Int("n", 1, "how many")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	if *n < 0 {
		return c.Fail(ExitFailure, "--n %d is negative", *n)
	}
	io.WriteString(stdout, strings.Repeat("x", *n)+"\n")
	return ExitOK
}

func TestShape(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, ExitUsage, "", "usage: prog COMMAND\n"},
		{[]string{"help"}, ExitOK, "usage: prog COMMAND\n", ""},
		{[]string{"-h"}, ExitOK, "usage: prog COMMAND\n", ""},
		{[]string{"nope"}, ExitUsage, "", "prog: unknown command \"nope\"\n\nusage: prog COMMAND\n"},
		{[]string{"cmd"}, ExitOK, "x\n", ""},
		{[]string{"cmd", "--n=3"}, ExitOK, "xxx\n", ""},
		{[]string{"cmd", "--help"}, ExitOK, "usage: prog cmd [--n N]\n\nFlags:\n  -n int\n    \thow many (default 1)\n", ""},
		{[]string{"cmd", "--m"}, ExitUsage, "", "prog cmd: flag provided but not defined: -m\nrun \"prog cmd --help\" for the flags\n"},
		{[]string{"cmd", "--n=x"}, ExitUsage, "", "prog cmd: invalid value \"x\" for flag -n: parse error\nrun \"prog cmd --help\" for the flags\n"},
		{[]string{"cmd", "extra"}, ExitUsage, "", "prog cmd: unexpected argument \"extra\"\n"},
		{[]string{"cmd", "--n=-1"}, ExitFailure, "", "prog cmd: --n -1 is negative\n"},
	} {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), "prog", "usage: prog COMMAND\n", map[string]Func{"cmd": command}, tc.args, &stdout, &stderr)
		if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
			t.Errorf("prog %q: exit %d, stdout %q, stderr %q; want %d, %q, %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}
