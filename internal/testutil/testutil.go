// Package testutil is what the project's tests share and no product code
// imports: the one policy for tests that need root, and the fixture's VF
// addresses, network namespaces and veth stand-ins for VFs, netlink socket
// counts, the allowed fixture roots and a log sink safe for goroutines; its
// subpackage agenttest runs the agent as a process. Hostile files (FIFOs,
// links, sparse files) are internal/safefile/safefiletest's.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TB is the part of testing.TB these helpers use.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// RequireRoot ends a test that needs root when it runs without: a skip
// naming why, except in CI (CI set), which runs as root, where not running
// is a failure: CI must not skip a privileged test.
func RequireRoot(tb TB, why string) {
	tb.Helper()
	switch rootPolicy(os.Geteuid(), os.Getenv("CI")) {
	case fail:
		tb.Fatal("needs root: " + why + "; CI runs as root and must not skip it")
	case skip:
		tb.Skip("needs root: " + why + " (CI runs as root and must not skip it)")
	}
}

type verdict int

const (
	run verdict = iota
	skip
	fail
)

// rootPolicy is RequireRoot's rule: run as root; else fail in CI, skip
// elsewhere.
func rootPolicy(euid int, ci string) verdict {
	switch {
	case euid == 0:
		return run
	case ci != "":
		return fail
	}
	return skip
}

// VFAddr is the PCI address of VF i of the fixtures' PF 0000:18:00.0,
// numbered as mlx5 numbers a ConnectX-7's VFs after its two PFs (ARI
// functions 2, 3, …): VF 0 is 0000:18:00.2, VF 6 is 0000:18:01.0.
func VFAddr(i int) string { return fmt.Sprintf("0000:18:%02x.%x", (i+2)/8, (i+2)%8) }

// WriteTemp writes content to a new file name in a directory of its own,
// removed after the test, and returns its path.
func WriteTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
