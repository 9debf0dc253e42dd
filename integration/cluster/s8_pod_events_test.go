//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
)

// flaps is how many times scenario 8 renames the VF away and back.
const flaps = 4

// TestS8PodEvents: with deploy/kube-reporting, a VF renamed inside a running
// pod shows as a Warning VFDrift event on that pod (what kubectl describe pod
// shows), naming the VF's PCI address and the reason, and its recovery as a
// Normal VFDriftRecovered; a port flapping between the two gives two events
// whose counts grow, not one event per flap. The monitor's per-attachment
// series carry the pod's namespace and name.
func TestS8PodEvents(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ds := c.ensureReporting(t, componentReporting, false)
	ctx := context.Background()
	const name = "drift-events"
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec(name, nadVF, kubecluster.ResourceVF)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DeletePods(ctx, 60*time.Second, name); err != nil {
			t.Error(err)
		}
	})
	pod, err := c.WaitRunning(ctx, name, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := kubecluster.Allocations(ctx, kubecluster.ResourceVF)
	if err != nil {
		t.Fatal(err)
	}
	pci := alloc[name][0]
	netns, err := c.PodNetns(pod)
	if err != nil {
		t.Fatal(err)
	}
	rec := recordOf(t, pci)
	info := promtext.Series("sriov_stable_attachment_info", "network", nadVF, "namespace", kubecluster.Namespace, "pod", name,
		"container_id", rec.ContainerID, "ifname", "net1", "pci", pci, "node_guid", c.Node.VFByPCI(pci).NodeGUID, "status", "ok")
	// The record's arrival queues the check (state directory watch); the
	// 30 s sweep would find it too, later.
	err = kubecluster.WaitFor(40*time.Second, 500*time.Millisecond, "the attachment's series with its pod", func() (bool, error) {
		m, err := scrape(ds)
		if err == nil && !m.Is(info, 1) {
			err = fmt.Errorf("no %s:\n%s", info, m.Dump("sriov_stable_attachment_info"))
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}

	var drifted, recovered corev1.Event
	var first time.Duration
	for i := 1; i <= flaps; i++ {
		start := time.Now()
		if err := kubecluster.RenameIn(netns, "net1", "drift0"); err != nil {
			t.Fatal(err)
		}
		if drifted, err = c.waitEventCount(ctx, name, "VFDrift", int32(i)); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			first = time.Since(start)
		}
		// A monitor that repairs renames may have put it back already.
		if l, _ := kubecluster.LinkIn(netns, "drift0"); l != nil {
			if err := kubecluster.RenameIn(netns, "drift0", "net1"); err != nil {
				t.Fatal(err)
			}
		}
		if recovered, err = c.waitEventCount(ctx, name, "VFDriftRecovered", int32(i)); err != nil {
			t.Fatal(err)
		}
	}
	figf("8 pod events", "net1 renamed to VFDrift event on the pod", "%.1f s (DaemonSet as shipped: link events, sweep every 30 s)", first.Seconds())
	if path, err := c.inClusterPath(ctx, ds); err != nil {
		t.Error(err)
	} else {
		figf("8 in-cluster", "the agent to the API server", "%s", path)
	}
	figf("8 pod events", "events after flapping", "%d renames: VFDrift count %d, VFDriftRecovered count %d", flaps, drifted.Count, recovered.Count)

	for _, want := range []string{"VF " + pci, "(net1, network " + nadVF + ")", "renamed: VF " + pci + " is named drift0, expected net1"} {
		if !strings.Contains(drifted.Message, want) {
			t.Errorf("the VFDrift event does not say %q: %s", want, drifted.Message)
		}
	}
	if drifted.Type != corev1.EventTypeWarning || recovered.Type != corev1.EventTypeNormal ||
		!strings.Contains(recovered.Message, "VF "+pci) || !strings.Contains(recovered.Message, "recovered from: renamed") {
		t.Errorf("events: %s %s: %s; %s %s: %s", drifted.Type, drifted.Reason, drifted.Message, recovered.Type, recovered.Reason, recovered.Message)
	}
	for _, e := range []corev1.Event{drifted, recovered} {
		if e.InvolvedObject.UID != pod.UID || e.Source.Component != "sriov-stable-agent" || e.Source.Host != kubecluster.NodeName {
			t.Errorf("event %s is about %+v from %+v, want pod UID %s from sriov-stable-agent on %s", e.Reason, e.InvolvedObject, e.Source, pod.UID, kubecluster.NodeName)
		}
	}
	// kubectl describe pod shows the events of the pod's UID.
	out := c.showKubectl(t, "describe", "pod", "-n", kubecluster.Namespace, name)
	if !strings.Contains(out, "VFDrift") || !strings.Contains(out, pci) {
		t.Errorf("kubectl describe pod does not show the VFDrift event naming %s", pci)
	}
	c.showKubectl(t, "get", "events", "-n", kubecluster.Namespace, "--field-selector", "involvedObject.name="+name+",source=sriov-stable-agent")
	agentLogClean(t, ds)
}

// waitEventCount waits until the pod has exactly one event of a reason and
// its count is n (the correlator folds repeats into one event), and
// returns it.
func (c *cluster) waitEventCount(ctx context.Context, pod, reason string, n int32) (corev1.Event, error) {
	var last corev1.Event
	// Link events see each rename at once; 15 s is well below the shipped
	// 30 s sweep, so a missed event fails here.
	err := kubecluster.WaitFor(15*time.Second, 250*time.Millisecond, fmt.Sprintf("%s event with count %d", reason, n), func() (bool, error) {
		evs, err := c.EventsOf(ctx, "Pod", pod, reason)
		if err != nil {
			return false, err
		}
		if len(evs) > 1 {
			return false, kubecluster.Fatal(fmt.Errorf("%d %s events on pod %s, want one with a count: %+v", len(evs), reason, pod, evs))
		}
		if len(evs) == 0 {
			return false, fmt.Errorf("no %s event yet", reason)
		}
		last = evs[0]
		if last.Count > n {
			return false, kubecluster.Fatal(fmt.Errorf("%s count %d, want %d", reason, last.Count, n))
		}
		return last.Count == n, fmt.Errorf("%s count %d", reason, last.Count)
	})
	return last, err
}
