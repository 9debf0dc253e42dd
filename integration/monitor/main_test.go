// Package monitor_test runs the real sriov-stable-agent against attachments
// made through libcni with the real plugin binaries, in private network and
// mount namespaces, and watches its /metrics while the test breaks and
// repairs VFs (veth stand-ins, fixture sysfs).
package monitor_test

import (
	"os"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.RunPrivileged(m, "monitor")) }
