// Package reliability_test is the fault, load and bad-input suite: a soak of
// ADD/CHECK/DEL cycles with renames and vanished namespaces, attachments in
// parallel and racing for one VF, kill -9 during ADD and DEL, and a corpus
// of hostile inputs. It drives the real binaries (through libcni, or exec'd
// with CNI_* variables as a runtime does) in private namespaces, with veth
// ends standing in for VFs and a fixture sysfs tree for the hardware.
//
// Sizes (CI runs the small defaults; `make soak` the full ones):
//
//	SRIOV_SOAK_CYCLES   ADD/CHECK/DEL cycles of TestSoak (default 120)
//	SRIOV_SOAK_WORKERS  VFs cycling at once in TestSoak (default 4)
//	SRIOV_CRASH_RUNS    kill -9 runs of TestCrashDuringAdd (default 60)
package reliability_test

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) {
	code, parent, err := harness.Reexec()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "privileged reliability suite cannot run in CI: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "SKIP privileged reliability suite: %v\n", err)
		os.Exit(0)
	}
	if parent {
		os.Exit(code)
	}
	// The plugin's default state directory lives under /var/lib. Hide the
	// host's behind a private tmpfs (this mount namespace only), so no input
	// can reach it and the bad-input corpus can prove nothing was written there.
	if err := unix.Mount("tmpfs", "/var/lib", "tmpfs", 0, "mode=755"); err != nil {
		fmt.Fprintf(os.Stderr, "mount private /var/lib: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
