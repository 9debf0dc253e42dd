// Package plugin_test drives sriov-stable-cni through libcni, chained after
// the upstream host-device plugin, in private namespaces with veth ends
// standing in for VFs and a fixture sysfs tree for the hardware.
package plugin_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) {
	code, parent, err := harness.Reexec()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "privileged integration suite cannot run in CI: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "SKIP privileged integration suite: %v\n", err)
		os.Exit(0)
	}
	if parent {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
