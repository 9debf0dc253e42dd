//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The DRA driver the scenario publishes devices as: dra-driver-sriov's name
// and attributes (its own pciAddress and the standard pciBusID).
const (
	draDriver      = "sriovnetwork.k8snetworkplumbingwg.io"
	draDeviceClass = "sriov-e2e-vf"
	draSlice       = "sriov-e2e-node-vfs"
)

// TestSADRATaints (scenario 10): a ResourceSlice published as a DRA driver would, with
// two VFs of the node, the first with a zero GUID. The agent keeps a
// DeviceTaintRule on the broken one, so kube-scheduler allocates the healthy
// one to a pod's ResourceClaim. With both broken (the second's port down)
// a new claim's pod stays Pending; the node's events name the taints. Once
// the port is up again the agent removes its rule and the scheduler
// allocates that VF. Everything is deleted afterwards, and the agent removes
// its rules for devices no longer published.
func TestSADRATaints(t *testing.T) {
	c := mustCluster(t)
	// As shipped: the doctor every 5 minutes; free VFs' ports are the port
	// watcher's (--port-interval 1s).
	ds := c.ensureReporting(t, componentReporting, false)
	ctx := context.Background()
	res := c.Client.ResourceV1()
	broken, healthy := c.Node.ZeroGUID, c.Node.VFs[len(c.Node.VFs)-2]
	if err := c.publishVFs(ctx, broken, healthy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Node.SetPortDown(healthy, false)
		_ = c.DeletePods(ctx, 60*time.Second, "dra-1", "dra-2")
		for _, claim := range []string{"vf-1", "vf-2"} {
			_ = res.ResourceClaims(kubecluster.Namespace).Delete(ctx, claim, metav1.DeleteOptions{})
		}
		_ = res.ResourceSlices().Delete(ctx, draSlice, metav1.DeleteOptions{})
		_ = res.DeviceClasses().Delete(ctx, draDeviceClass, metav1.DeleteOptions{})
	})
	start := time.Now()
	if _, err := c.waitDeviceTaints(ctx, map[string]string{deviceName(broken.PCI): "sriov-stable-cni.io/guid=invalid"}); err != nil {
		t.Fatal(err)
	}
	figf("10 DRA", "slice published to DeviceTaintRule on the zero-GUID VF", "%.1f s (the shipped DaemonSet)", time.Since(start).Seconds())
	c.showKubectl(t, "get", "devicetaintrules", "-o", "custom-columns=NAME:.metadata.name,DEVICE:.spec.deviceSelector.device,"+
		"KEY:.spec.taint.key,VALUE:.spec.taint.value,EFFECT:.spec.taint.effect,PCI:.metadata.annotations.sriov-stable-cni\\.io/pci")

	// The healthy VF, though listed second, is the one allocated.
	start = time.Now()
	got, err := c.claimPod(ctx, "dra-1", "vf-1")
	if err != nil {
		t.Fatal(err)
	}
	figf("10 DRA", "claim created to allocated", "%.1f s", time.Since(start).Seconds())
	if got != deviceName(healthy.PCI) {
		t.Errorf("the scheduler allocated %s, want the healthy VF %s (not %s, whose GUID is zero)", got, deviceName(healthy.PCI), deviceName(broken.PCI))
	}
	if err := c.DeletePods(ctx, 60*time.Second, "dra-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.deleteClaim(ctx, "vf-1"); err != nil {
		t.Fatal(err)
	}

	c.freeVFHealthLatency(ctx, t, ds, healthy, broken, freeVFFlips)

	// Both broken: the second VF's port goes down.
	c.Node.SetPortDown(healthy, true)
	if _, err := c.waitDeviceTaints(ctx, map[string]string{deviceName(broken.PCI): "sriov-stable-cni.io/guid=invalid",
		deviceName(healthy.PCI): "sriov-stable-cni.io/port-state=not-active"}); err != nil {
		t.Fatal(err)
	}
	if err := c.createClaimPod(ctx, "dra-2", "vf-2"); err != nil {
		t.Fatal(err)
	}
	var sched corev1.Event
	err = kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "FailedScheduling of dra-2", func() (bool, error) {
		for _, e := range c.PodEvents(ctx, "dra-2", corev1.EventTypeWarning) {
			if e.Reason == "FailedScheduling" {
				sched = e
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %s", c.PodTrouble("dra-2"))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-scheduler on dra-2: %s: %s", sched.Reason, sched.Message)
	time.Sleep(2 * doctorInterval)
	if claim, err := res.ResourceClaims(kubecluster.Namespace).Get(ctx, "vf-2", metav1.GetOptions{}); err != nil || claim.Status.Allocation != nil {
		t.Errorf("with both VFs tainted the claim is allocated (%v): %+v", err, claim.Status.Allocation)
	}
	if p, err := c.Client.CoreV1().Pods(kubecluster.Namespace).Get(ctx, "dra-2", metav1.GetOptions{}); err != nil ||
		p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("with both VFs tainted pod dra-2 is %v on %q (%v)", p.Status.Phase, p.Spec.NodeName, err)
	}
	// Why: the agent's events on the node name each VF's taint.
	for pci, key := range map[string]string{broken.PCI: "sriov-stable-cni.io/guid=invalid:NoSchedule",
		healthy.PCI: "sriov-stable-cni.io/port-state=not-active:NoSchedule"} {
		evs, err := c.EventsOf(ctx, "Node", kubecluster.NodeName, "VFDeviceTainted")
		if err != nil {
			t.Fatal(err)
		}
		if !hasEvent(evs, "VF "+pci, key) {
			t.Errorf("no VFDeviceTainted event on the node names VF %s and %s: %+v", pci, key, evs)
		}
	}
	c.showKubectl(t, "describe", "pod", "-n", kubecluster.Namespace, "dra-2")
	c.showKubectl(t, "get", "events", "-n", "default", "--field-selector", "involvedObject.kind=Node,source=sriov-stable-agent")

	// The port comes up: the rule goes and the pod gets that VF.
	start = time.Now()
	c.Node.SetPortDown(healthy, false)
	if _, err := c.waitDeviceTaints(ctx, map[string]string{deviceName(broken.PCI): "sriov-stable-cni.io/guid=invalid"}); err != nil {
		t.Fatal(err)
	}
	got, err = c.waitAllocated(ctx, "vf-2")
	if err != nil {
		t.Fatal(err)
	}
	figf("10 DRA", "port up to the pending claim allocated", "%.1f s", time.Since(start).Seconds())
	if got != deviceName(healthy.PCI) {
		t.Errorf("allocated %s once the port is up, want %s", got, deviceName(healthy.PCI))
	}

	// Nothing published, nothing tainted.
	if err := c.DeletePods(ctx, 60*time.Second, "dra-2"); err != nil {
		t.Fatal(err)
	}
	for _, del := range []func() error{
		func() error { return c.deleteClaim(ctx, "vf-2") },
		func() error { return res.ResourceSlices().Delete(ctx, draSlice, metav1.DeleteOptions{}) },
		func() error { return res.DeviceClasses().Delete(ctx, draDeviceClass, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.waitDeviceTaints(ctx, map[string]string{}); err != nil {
		t.Error(err)
	}
	agentLogClean(t, ds)
}

// deviceName is a VF's device name in the slice, as dra-driver-sriov
// names them: its PCI address with dashes.
func deviceName(pci string) string { return strings.NewReplacer(":", "-", ".", "-").Replace(pci) }

// publishVFs creates the DeviceClass of the driver and the node's
// ResourceSlice with the VFs, in that order.
func (c *cluster) publishVFs(ctx context.Context, vfs ...sysfstest.DGXVF) error {
	res := c.Client.ResourceV1()
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draDeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", draDriver)}}}}}
	if _, err := res.DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	node := kubecluster.NodeName
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: draSlice},
		Spec: resourcev1.ResourceSliceSpec{Driver: draDriver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: kubecluster.NodeName, Generation: 1, ResourceSliceCount: 1}}}
	for _, vf := range vfs {
		pci := vf.PCI
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: deviceName(pci),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				draDriver + "/pciAddress":         {StringValue: &pci},
				"resource.kubernetes.io/pciBusID": {StringValue: &pci},
			}})
	}
	_, err := res.ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// waitDeviceTaints waits until the agent's DeviceTaintRules of the node
// taint exactly the devices given (device → key=value), with effect
// NoSchedule, and returns them.
func (c *cluster) waitDeviceTaints(ctx context.Context, want map[string]string) ([]resourcev1.DeviceTaintRule, error) {
	sel := labels.Set{"app.kubernetes.io/managed-by": "sriov-stable-agent", "sriov-stable-cni.io/node": kubecluster.NodeName}.String()
	var rules []resourcev1.DeviceTaintRule
	err := kubecluster.WaitFor(3*doctorInterval+20*time.Second, 250*time.Millisecond, fmt.Sprintf("DeviceTaintRules %v", want), func() (bool, error) {
		list, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		rules = list.Items
		got := map[string]string{}
		for _, r := range rules {
			s := r.Spec.DeviceSelector
			if s == nil || s.Device == nil || s.Driver == nil || *s.Driver != draDriver || s.Pool == nil || *s.Pool != kubecluster.NodeName ||
				r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule {
				return false, fmt.Errorf("rule %s: %+v", r.Name, r.Spec)
			}
			got[*s.Device] = r.Spec.Taint.Key + "=" + r.Spec.Taint.Value
		}
		if len(got) != len(want) {
			return false, fmt.Errorf("rules taint %v", got)
		}
		for d, t := range want {
			if got[d] != t {
				return false, fmt.Errorf("rules taint %v", got)
			}
		}
		return true, nil
	})
	return rules, err
}

// createClaimPod creates a ResourceClaim for one VF of the class and a pod
// using it.
func (c *cluster) createClaimPod(ctx context.Context, pod, claim string) error {
	rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: kubecluster.Namespace},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "vf", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDeviceClass,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
	if _, err := c.Client.ResourceV1().ResourceClaims(kubecluster.Namespace).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return err
	}
	p := kubecluster.PodSpec(pod, "", "")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "vf", ResourceClaimName: &claim}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "vf"}}
	_, err := c.CreatePod(ctx, p)
	return err
}

// claimPod creates a claim and its pod and returns the device the
// scheduler allocated.
func (c *cluster) claimPod(ctx context.Context, pod, claim string) (string, error) {
	if err := c.createClaimPod(ctx, pod, claim); err != nil {
		return "", err
	}
	return c.waitAllocated(ctx, claim)
}

// waitAllocated waits until kube-scheduler has allocated the claim and
// returns its device.
func (c *cluster) waitAllocated(ctx context.Context, claim string) (string, error) {
	var device string
	err := kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "claim "+claim+" allocated", func() (bool, error) {
		rc, err := c.Client.ResourceV1().ResourceClaims(kubecluster.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		a := rc.Status.Allocation
		if a == nil || len(a.Devices.Results) != 1 {
			return false, fmt.Errorf("not allocated: %+v", rc.Status)
		}
		device = a.Devices.Results[0].Device
		return true, nil
	})
	return device, err
}

// deleteClaim deletes a claim and waits until it is gone (the resource
// claim controller releases it once no pod uses it).
func (c *cluster) deleteClaim(ctx context.Context, claim string) error {
	claims := c.Client.ResourceV1().ResourceClaims(kubecluster.Namespace)
	if err := claims.Delete(ctx, claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "claim "+claim+" deleted", func() (bool, error) {
		_, err := claims.Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func hasEvent(evs []corev1.Event, parts ...string) bool {
	for _, e := range evs {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(e.Message, p)
		}
		if all {
			return true
		}
	}
	return false
}

// freeVFFlips is how many times each fault of the free VF comes and goes
// in freeVFHealthLatency; freeVFBound is what each change may take to
// reach both the VF's DeviceTaintRule and the node condition.
const (
	freeVFFlips = 10
	freeVFBound = 2 * time.Second
)

// freeVFFault is a fault of a free VF the agent hears by itself: set
// brings it or takes it away; check and taint are its finding's check
// and the key=value of its device taint.
type freeVFFault struct {
	name, check, taint string
	set                func(broken bool)
}

// freeVFHealthLatency brings each of a free VF's faults (its RDMA port
// down; its netdev up without carrier) and takes it away n times, and
// measures each change's time to its DeviceTaintRule (created, then
// deleted) and to the node condition's message (naming the VF under the
// fault's check, then not), polling both every 20 ms. The agent runs as
// shipped (the doctor every 5 minutes): only its port watcher can be this
// quick. It fails when any change takes longer than freeVFBound.
func (c *cluster) freeVFHealthLatency(ctx context.Context, t *testing.T, ds *corev1.Pod, vf, zero sysfstest.DGXVF, n int) {
	t.Helper()
	// Its netdev up in the fixture's sysfs (what the agent reads: its
	// pod's netns hears none of the host's link events), with and without
	// carrier; left down, as a free VF's is, its carrier is not judged.
	linkState := func(up, carrier bool) { c.Node.DGX.SetLinkState(vf.PCI, vf.NetDev, up, carrier) }
	faults := []freeVFFault{
		{name: "port", check: "port-state", taint: "sriov-stable-cni.io/port-state=not-active",
			set: func(broken bool) { c.Node.SetPortDown(vf, broken) }},
		{name: "carrier", check: "carrier", taint: "sriov-stable-cni.io/carrier=down",
			set: func(broken bool) { linkState(true, !broken) }},
	}
	linkState(true, true)
	defer linkState(false, false)
	base := map[string]string{deviceName(zero.PCI): "sriov-stable-cni.io/guid=invalid"}
	for _, fault := range faults {
		defer fault.set(false)
		down := map[string]string{deviceName(zero.PCI): "sriov-stable-cni.io/guid=invalid", deviceName(vf.PCI): fault.taint}
		toRule, toCondition := c.freeVFChanges(ctx, t, ds, vf, fault, n, base, down)
		c.freeVFFigures(t, fault, toRule, toCondition)
	}
}

// freeVFChanges brings the fault and takes it away n times and returns
// each change's time to the rules and to the node condition.
func (c *cluster) freeVFChanges(ctx context.Context, t *testing.T, ds *corev1.Pod, vf sysfstest.DGXVF, fault freeVFFault, n int,
	base, down map[string]string) (toRule, toCondition []time.Duration) {
	t.Helper()
	sel := labels.Set{"app.kubernetes.io/managed-by": "sriov-stable-agent", "sriov-stable-cni.io/node": kubecluster.NodeName}.String()
	rulesAre := func(want map[string]string) (bool, error) {
		list, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		got := map[string]string{}
		for _, r := range list.Items {
			if s := r.Spec.DeviceSelector; s != nil && s.Device != nil {
				got[*s.Device] = r.Spec.Taint.Key + "=" + r.Spec.Taint.Value
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	}
	conditionNames := func(want bool) (bool, error) {
		cond, _, err := c.NodeCondition(ctx, conditionType)
		if err != nil || cond == nil {
			return false, err
		}
		return strings.Contains(cond.Message, fault.check+" "+vf.PCI) == want, nil
	}
	measure := func(what string, rules map[string]string, named bool) {
		t.Helper()
		start := time.Now()
		var ruleAt, condAt time.Duration
		err := kubecluster.WaitFor(freeVFBound+10*time.Second, 20*time.Millisecond, what, func() (bool, error) {
			if ruleAt == 0 {
				if ok, err := rulesAre(rules); err != nil {
					return false, err
				} else if ok {
					ruleAt = time.Since(start)
				}
			}
			if condAt == 0 {
				if ok, err := conditionNames(named); err != nil {
					return false, err
				} else if ok {
					condAt = time.Since(start)
				}
			}
			return ruleAt > 0 && condAt > 0, nil
		})
		if err != nil {
			m, scrapeErr := scrape(ds)
			cond, _, _ := c.NodeCondition(ctx, conditionType)
			t.Fatalf("%v (rule after %v, condition after %v; condition %+v); the agent's findings (scrape error %v):\n%s",
				err, ruleAt, condAt, cond, scrapeErr, m.Dump("sriov_stable_doctor_finding"))
		}
		toRule, toCondition = append(toRule, ruleAt), append(toCondition, condAt)
	}
	for range n {
		fault.set(true)
		measure("the free VF's "+fault.name+" down in its DeviceTaintRule and the node condition", down, true)
		fault.set(false)
		measure("the free VF's "+fault.name+" up in its DeviceTaintRule and the node condition", base, false)
	}
	return toRule, toCondition
}

// freeVFFigures prints a fault's figures and fails when any change took
// longer than freeVFBound.
func (c *cluster) freeVFFigures(t *testing.T, fault freeVFFault, toRule, toCondition []time.Duration) {
	t.Helper()
	slowest := func(ds []time.Duration) time.Duration { return slices.Max(ds) }
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	figf("10 DRA", fmt.Sprintf("free VF %s change to DeviceTaintRule (%d changes)", fault.name, len(toRule)), "median %.2f s, slowest %.2f s (bound %v)",
		median(toRule).Seconds(), slowest(toRule).Seconds(), freeVFBound)
	figf("10 DRA", fmt.Sprintf("free VF %s change to node condition (%d changes)", fault.name, len(toCondition)), "median %.2f s, slowest %.2f s (bound %v)",
		median(toCondition).Seconds(), slowest(toCondition).Seconds(), freeVFBound)
	if slowest(toRule) > freeVFBound || slowest(toCondition) > freeVFBound {
		t.Errorf("a free VF's %s change took up to %v to its DeviceTaintRule and %v to the node condition, want each within %v",
			fault.name, slowest(toRule), slowest(toCondition), freeVFBound)
	}
}
