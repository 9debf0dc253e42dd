// Package monitor_test runs the real sriov-stable-agent against attachments
// made through libcni with the real plugin binaries, in private network and
// mount namespaces, and watches its /metrics while the test breaks and
// repairs VFs (veth stand-ins, fixture sysfs).
package monitor_test

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
			fmt.Fprintf(os.Stderr, "privileged monitor suite cannot run in CI: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "SKIP privileged monitor suite: %v\n", err)
		os.Exit(0)
	}
	if parent {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
