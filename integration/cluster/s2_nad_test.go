//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	corev1 "k8s.io/api/core/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// eightPods are scenario 2's pods, which scenario 3 goes on with.
var eightPods []string

// startPods creates pods on a NAD (one VF of res each), all at once, and
// waits until every one runs; it returns them and each one's create to
// Ready time.
func (c *cluster) startPods(ctx context.Context, names []string, nad, res string, timeout time.Duration) ([]*corev1.Pod, []time.Duration, error) {
	pods := make([]*corev1.Pod, len(names))
	took := make([]time.Duration, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			start := time.Now()
			if _, err := c.CreatePod(ctx, kubecluster.PodSpec(name, nad, res)); err != nil {
				errs[i] = err
				return
			}
			pods[i], errs[i] = c.WaitRunning(ctx, name, timeout)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return pods, took, err
		}
	}
	return pods, took, nil
}

// checkAttachment checks that the pod's net1 is exactly the VF kubelet
// allocated to it: in the pod's netns (found by its IP), net1 carries the
// stable altname of that VF's PCI address and the stand-in's MAC, and the
// pod's network-status (written by Multus from our result) names net1 with
// that MAC and the VF's PCI address, RDMA device and PF in its device-info:
// the last two our plugin's completion of the Device Info file.
func (c *cluster) checkAttachment(p *corev1.Pod, nad, pci string) error {
	netns, err := c.PodNetns(p)
	if err != nil {
		return err
	}
	l, err := kubecluster.LinkIn(netns, "net1")
	if err != nil || l == nil {
		return fmt.Errorf("pod %s: no net1 in %s (%v)", p.Name, netns, err)
	}
	want := c.Node.StandIns[pci]
	if want == nil {
		return fmt.Errorf("pod %s was allocated %s, not a VF of the node", p.Name, pci)
	}
	if !slices.Contains(l.Attrs().AltNames, want.AltName) {
		return fmt.Errorf("pod %s: net1 has altnames %v, not %s of the allocated VF %s", p.Name, l.Attrs().AltNames, want.AltName, pci)
	}
	if mac := l.Attrs().HardwareAddr.String(); mac != c.Node.MACs[pci] {
		return fmt.Errorf("pod %s: net1 has MAC %s, the allocated VF %s has %s", p.Name, mac, pci, c.Node.MACs[pci])
	}
	st, err := kubecluster.NetworkStatus(p)
	if err != nil {
		return err
	}
	for _, s := range st {
		if s.Name != kubecluster.Namespace+"/"+nad {
			continue
		}
		if s.Interface != "net1" || s.Mac != c.Node.MACs[pci] {
			return fmt.Errorf("pod %s: network-status of %s is interface %q mac %q, want net1 %s", p.Name, nad, s.Interface, s.Mac, c.Node.MACs[pci])
		}
		if s.DeviceInfo == nil || s.DeviceInfo.Pci == nil || s.DeviceInfo.Pci.PciAddress != pci {
			return fmt.Errorf("pod %s: network-status of %s has device-info %+v, want pci-address %s", p.Name, nad, s.DeviceInfo, pci)
		}
		// The device plugin's file has the address alone (checked in
		// scenario 2): the RDMA device and the PF are our plugin's
		// completion of the CNIDeviceInfoFile Multus handed it.
		if got, want := *s.DeviceInfo.Pci, (nadv1.PciDevice{PciAddress: pci, RdmaDevice: c.Node.VFByPCI(pci).RDMA, PfPciAddress: c.Node.PFOf(pci)}); got != want {
			return fmt.Errorf("pod %s: network-status of %s has pci device-info %+v, want %+v (rdma-device and pf-pci-address completed by sriov-stable-cni)",
				p.Name, nad, got, want)
		}
		return nil
	}
	return fmt.Errorf("pod %s: network-status has no entry for %s/%s: %s", p.Name, kubecluster.Namespace, nad, p.Annotations[nadv1.NetworkStatusAnnot])
}

// checkRepaired checks that our plugin found the VF under its udev name (its
// host name) and renamed it net1: its record's foundAs, and its log line.
func (c *cluster) checkRepaired(t *testing.T, pci string) error {
	udev := c.Node.VFByPCI(pci).NetDev
	rec := recordOf(t, pci)
	if rec.FoundAs != udev || rec.IfName != "net1" {
		return fmt.Errorf("VF %s: the record says ADD found it as %q for %q, want its udev name %s renamed to net1", pci, rec.FoundAs, rec.IfName, udev)
	}
	if log := kubecluster.ReadText(pluginLog); !logHas(log, `msg="repaired VF name"`, "vf="+pci, "was="+udev, "now=net1") {
		return fmt.Errorf("VF %s: %s has no \"repaired VF name\" line from %s to net1", pci, pluginLog, udev)
	}
	return nil
}

// ensureEightPods starts scenario 2's pods unless they run already.
func (c *cluster) ensureEightPods(t *testing.T) {
	t.Helper()
	if len(eightPods) > 0 {
		return
	}
	c.ensureNADs(t)
	names := []string{}
	for i := range 8 {
		names = append(names, fmt.Sprintf("vf-%d", i))
	}
	if _, _, err := c.startPods(context.Background(), names, nadUdevName, kubecluster.ResourceVF, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	eightPods = names
}

// TestS2EightPods: a NAD with a resource name whose chain hands our plugin
// each VF under its udev name (host-device moves it in as net1, then
// rename-as-udev gives it the name udev gave it on the host, as a udev rule
// racing the CNI does); 8 pods asking for one VF each all run, each with
// exactly the VF kubelet allocated as net1, renamed so by our plugin (its
// record and its log say it found the udev name), and the network-status
// annotation shows it with the Device Info our plugin completed.
//
// The stand-ins carry their stable altname from the start (as hostconfig's
// .link files give it): a veth has no PCI parent and no bus-info, so the
// altname is the only identity our plugin can find it by, and it refuses
// to guess one by name (TestVFWithoutIdentityIsNotGuessed). That the
// plugin adds a missing altname is shown on real VFs, which have a PCI
// parent, in the QEMU lab (TestLab01), not here.
func TestS2EightPods(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ctx := context.Background()
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("vf-%d", i))
	}
	start := time.Now()
	pods, took, err := c.startPods(ctx, names, nadUdevName, kubecluster.ResourceVF, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	eightPods = names
	p50, p90 := quantiles(took)
	figf("2 NAD", "8 pods at once, create to all Ready (each VF handed over under its udev name)", "%.1f s (per pod p50 %s, p90 %s)", time.Since(start).Seconds(), ms(p50), ms(p90))
	alloc, err := kubecluster.Allocations(ctx, kubecluster.ResourceVF)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, p := range pods {
		ids := alloc[p.Name]
		if len(ids) != 1 {
			t.Errorf("pod %s holds %d devices of %s (%v), want 1", p.Name, len(ids), kubecluster.ResourceVF, ids)
			continue
		}
		if other, dup := seen[ids[0]]; dup {
			t.Errorf("pods %s and %s were both allocated %s", other, p.Name, ids[0])
		}
		seen[ids[0]] = p.Name
		if err := c.checkAttachment(p, nadUdevName, ids[0]); err != nil {
			t.Error(err)
		}
		if err := c.checkRepaired(t, ids[0]); err != nil {
			t.Error(err)
		}
	}
	// What Multus copied for our plugin to complete: the device plugin's
	// file of each allocated VF names its address alone.
	for pci := range seen {
		info, err := nadutils.LoadDeviceInfoFromDP(kubecluster.ResourceVF, pci)
		if err != nil {
			t.Errorf("the device plugin's Device Info file of %s: %v", pci, err)
			continue
		}
		if info.Pci == nil || info.Pci.PciAddress != pci || info.Pci.RdmaDevice != "" || info.Pci.PfPciAddress != "" {
			t.Errorf("the device plugin's Device Info file of %s is %+v, want its pci-address alone", pci, info.Pci)
		}
	}
	if recs := records(t); len(recs) != 8 {
		t.Errorf("%d attachment records on the node, want 8: %v", len(recs), recs)
	}
	var vfs []string
	for pci := range seen {
		vfs = append(vfs, pci)
	}
	slices.Sort(vfs)
	if !t.Failed() {
		t.Logf("VFs allocated, found under their udev name, renamed net1 and verified in the pods: %s", strings.Join(vfs, " "))
	}
}
