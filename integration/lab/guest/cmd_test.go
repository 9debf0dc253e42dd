//go:build labguest

package guest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolTimeout bounds one run of a command-line tool (doctor, hostconfig,
// hostconfig apply) under TCG.
const toolTimeout = 3 * time.Minute

// ran is what a command printed and how it exited.
type ran struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// run runs a command with extra environment variables (KEY=VALUE) and
// returns its output and exit code; it fails the test only when the
// command cannot be started or outlives toolTimeout.
func run(t testing.TB, env []string, name string, args ...string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s did not finish within %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), toolTimeout, r.stdout, r.stderr)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", name, err)
	}
	return r
}

// tool is the path of a binary on the lab's share (bin/ of make build).
func tool(name string) string { return filepath.Join(*binDir, name) }
