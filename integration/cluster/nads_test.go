//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
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
			{nadVF, resourceVF, []map[string]any{hostDevice(), ours()}},
			{nadUdev, resourceVF, []map[string]any{hostDevice(), {"type": "rename-as-udev", "newName": "ib0"}, ours()}},
			{nadUdevName, resourceVF, []map[string]any{hostDevice(), {"type": "rename-as-udev", "newName": "{host}"}, ours()}},
			{nadZeroGUID, resourceZeroGUID, []map[string]any{hostDevice(), ours()}},
			{nadHostDev, resourceVF, []map[string]any{hostDevice()}},
		} {
			if err = c.createNAD(ctx, n.name, n.resource, n.plugins...); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) createNAD(ctx context.Context, name, resource string, plugins ...map[string]any) error {
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	if err != nil {
		return err
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace,
			Annotations: map[string]string{resourceNameAnnotation: resource}},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(conf)},
	}
	_, err = c.nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(testNamespace).Create(ctx, nad, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create NAD %s: %w", name, err)
	}
	return nil
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

// allocations asks kubelet's PodResources API (the socket Multus reads)
// which devices of a resource each pod of the test namespace holds.
func allocations(ctx context.Context, resource string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix:///var/lib/kubelet/pod-resources/kubelet.sock",
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresources.NewPodResourcesListerClient(conn).List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List: %w", err)
	}
	out := map[string][]string{}
	for _, p := range resp.PodResources {
		if p.Namespace != testNamespace {
			continue
		}
		for _, ctr := range p.Containers {
			for _, d := range ctr.Devices {
				if d.ResourceName == resource {
					out[p.Name] = append(out[p.Name], d.DeviceIds...)
				}
			}
		}
	}
	return out, nil
}
