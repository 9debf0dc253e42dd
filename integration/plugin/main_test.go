// Package plugin_test drives sriov-stable-cni through libcni, chained after
// the upstream host-device plugin, in private namespaces with veth ends
// standing in for VFs and a fixture sysfs tree for the hardware.
package plugin_test

import (
	"os"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.RunPrivileged(m, "plugin")) }
