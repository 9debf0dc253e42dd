// Package reliability_test is the fault, load and bad-input suite: a soak of
// ADD/CHECK/DEL cycles with renames and vanished namespaces, attachments in
// parallel and racing for one VF, SIGKILL inside ADD's and DEL's steps (a
// plugin built with -tags crashpoints kills itself at a named point), and a
// corpus of hostile inputs. It drives the real binaries (through libcni, or
// exec'd with CNI_* variables as a runtime does) in private namespaces, with
// veth ends standing in for VFs and a fixture sysfs tree for the hardware.
//
// Sizes (CI runs the small defaults; `make soak` the full ones):
//
//	SRIOV_SOAK_CYCLES   ADD/CHECK/DEL cycles of TestSoak (default 120)
//	SRIOV_SOAK_WORKERS  VFs cycling at once in TestSoak (default 4)
//	SRIOV_CRASH_RUNS    kill runs of TestCrashDuringAdd (default 60; at least one per kill point)
//	SRIOV_CRASH_SEED    replays a crash run's order of kill points
package reliability_test

import (
	"os"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.RunPrivileged(m, "reliability")) }
