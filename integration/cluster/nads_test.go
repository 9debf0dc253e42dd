//go:build clustere2e

package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// The NetworkAttachmentDefinitions of the scenarios. Multus writes the
// allocated VF's address into every plugin as deviceID and pciBusID:
// host-device moves the netdev sysfs names for it (the stand-in) into the
// pod, then our plugin finds, repairs and verifies it.
const (
	nadVF       = "ib-vf"           // [host-device, sriov-stable-cni]
	nadUdev     = "ib-vf-udev"      // [host-device, rename-as-udev, sriov-stable-cni]: renames injected as the soak does
	nadUdevName = "ib-vf-udev-name" // as nadUdev, the VF renamed to its udev (host) name: scenario 2
	nadZeroGUID = "ib-vf-zero-guid" // as nadVF, on the VF with a zero GUID
	nadHostDev  = "ib-vf-hostdev"   // [host-device] alone: the baseline of the latency figure
)

// ours is the plugin's entry in a NAD: defaults (state dir /run/cni/sriov-stable,
// which the monitor reads; sysfs root /sys, the fixture), a log on the node,
// and the CNIDeviceInfoFile capability, so that libcni hands it the file
// Multus copied from the device plugin's and it completes that file's
// rdma-device and pf-pci-address (docs/install.md, docs/architecture.md).
func ours() map[string]any {
	return map[string]any{"type": "sriov-stable-cni", "logFile": pluginLog, "logLevel": "debug",
		"capabilities": map[string]any{"CNIDeviceInfoFile": true}}
}

func hostDevice() map[string]any { return map[string]any{"type": "host-device"} }

// pluginLog is our plugin's log on the node (in the work dir's var-log/).
const pluginLog = "/var/log/sriov-stable-cni.log"

var nadsOnce sync.Once

// ensureNADs creates the scenarios' NADs once (and the DaemonSet first, as
// they need the plugin installed).
func (c *cluster) ensureNADs(t *testing.T) {
	t.Helper()
	c.ensureDaemonSet(t)
	var err error
	nadsOnce.Do(func() {
		ctx := context.Background()
		for _, n := range []struct {
			name, resource string
			plugins        []map[string]any
		}{
			{nadVF, kubecluster.ResourceVF, []map[string]any{hostDevice(), ours()}},
			{nadUdev, kubecluster.ResourceVF, []map[string]any{hostDevice(), {"type": "rename-as-udev", "newName": "ib0"}, ours()}},
			{nadUdevName, kubecluster.ResourceVF, []map[string]any{hostDevice(), {"type": "rename-as-udev", "newName": "{host}"}, ours()}},
			{nadZeroGUID, kubecluster.ResourceZeroGUID, []map[string]any{hostDevice(), ours()}},
			{nadHostDev, kubecluster.ResourceVF, []map[string]any{hostDevice()}},
		} {
			if err = c.CreateNAD(ctx, n.name, n.resource, n.plugins...); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

var daemonSetOnce sync.Once

// ensureDaemonSet deploys version a of the DaemonSet unless a scenario
// already did (scenario 1 does, with its checks).
func (c *cluster) ensureDaemonSet(t *testing.T) {
	t.Helper()
	var err error
	daemonSetOnce.Do(func() { _, err = c.deployDaemonSet(context.Background(), *versionA, 120*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
}
