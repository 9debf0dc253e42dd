package testutil

import (
	"os"
	"slices"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// FixtureRoots are where the suites, the demo and the bench keep fixture
// sysfs trees, state dirs and plugin logs: the temp dir and the places a
// run points TMPDIR or the bench's -disk-dir at.
func FixtureRoots() []string { return []string{os.TempDir(), "/dev/shm", "/tmp", "/var/tmp"} }

// AllowRoots adds dirs to config.AllowedRootsEnv in this process's
// environment, as a node administrator adds roots in the runtime's, so the
// plugin honours stateDir, sysfsRoot and logFile there. libcni hands the
// environment to every plugin it runs; a plugin started with an
// environment of its own needs RootsEnv.
func AllowRoots(dirs ...string) {
	cur := os.Getenv(config.AllowedRootsEnv)
	for _, d := range dirs {
		if !slices.Contains(strings.Split(cur, ":"), d) {
			cur = strings.TrimPrefix(cur+":"+d, ":")
		}
	}
	os.Setenv(config.AllowedRootsEnv, cur)
}

// Merge returns base with extra's keys set in it; a nil value in extra
// deletes the key. Tests use it to vary one plugin entry.
func Merge(base, extra map[string]any) map[string]any {
	for k, v := range extra {
		if v == nil {
			delete(base, k)
			continue
		}
		base[k] = v
	}
	return base
}
