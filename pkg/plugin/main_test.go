package plugin_test

import (
	"os"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

// TestMain allows the plugin, which runs in-process here, the fixture
// roots: the tests keep its sysfs tree, state dir and log in temp dirs,
// outside its default roots, as a node administrator would allow them
// with config.AllowedRootsEnv.
func TestMain(m *testing.M) {
	testutil.AllowRoots(testutil.FixtureRoots()...)
	os.Exit(m.Run())
}
