//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// TestS9NodeCondition: with deploy/kube-reporting-taint, a node whose
// fixture gets a zero GUID on a VF gets the condition SRIOVVFsHealthy=False
// (reason GUIDInvalid, the VF named) and the taint
// sriov-stable-cni.io/vf-unhealthy:NoSchedule, which keeps a new pod off the
// node; once the GUID is mended the condition is True again, the taint is
// gone and the pod is scheduled. The condition is written only when it
// changes.
func TestS9NodeCondition(t *testing.T) {
	c := mustCluster(t)
	ctx := context.Background()
	vf := c.Node.ZeroGUID
	// The fixture's broken VF (scenario 4's) is mended first: a healthy node.
	c.Node.SetGUID(vf, vf.NodeGUID)
	t.Cleanup(func() {
		// The node as the suite built it: reporting without the taint (and
		// its role), no taint left, the zero GUID back.
		c.ensureReporting(t, componentReporting, true)
		c.untaint(t)
		c.Node.SetGUID(vf, kubecluster.UnsetGUID)
	})
	ds := c.ensureReporting(t, componentTaint, true)
	healthy, err := c.waitNodeHealth(ctx, corev1.ConditionTrue, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("healthy node: %s=%s (%s): %s", conditionType, healthy.Status, healthy.Reason, healthy.Message)

	start := time.Now()
	c.Node.SetGUID(vf, kubecluster.UnsetGUID)
	broken, err := c.waitNodeHealth(ctx, corev1.ConditionFalse, "GUIDInvalid", "guid-invalid")
	if err != nil {
		t.Fatal(err)
	}
	figf("9 node condition", "zero GUID written to condition False and node tainted", "%.1f s (doctor every %v)",
		time.Since(start).Seconds(), doctorInterval)
	if !strings.Contains(broken.Message, "guid-invalid "+vf.PCI) {
		t.Errorf("the condition's message does not name the VF %s: %s", vf.PCI, broken.Message)
	}
	// The condition is patched on change only: a doctor run that finds the
	// same leaves it (and its heartbeat) alone.
	time.Sleep(2 * doctorInterval)
	again, _, err := c.NodeCondition(ctx, conditionType)
	if err != nil {
		t.Fatal(err)
	}
	if !again.LastHeartbeatTime.Equal(&broken.LastHeartbeatTime) {
		t.Errorf("the condition was written again without a change: heartbeat %v, then %v", broken.LastHeartbeatTime, again.LastHeartbeatTime)
	}

	// A new pod without a toleration stays off the node while it is tainted
	// (kube-scheduler's event says "untolerated taint(s)" without naming it;
	// kubectl describe node shows which).
	const name = "after-taint"
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec(name, "", "")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DeletePods(ctx, 60*time.Second, name); err != nil {
			t.Error(err)
		}
	})
	err = kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "FailedScheduling for the taint", func() (bool, error) {
		for _, e := range c.PodEvents(ctx, name, corev1.EventTypeWarning) {
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "untolerated taint") {
				t.Logf("kube-scheduler: %s: %s", e.Reason, e.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %s", c.PodTrouble(name))
	})
	if err != nil {
		t.Error(err)
	}
	out := c.showKubectl(t, "describe", "node", kubecluster.NodeName)
	if !strings.Contains(out, conditionType) || !strings.Contains(out, taintKey+"=guid-invalid:NoSchedule") {
		t.Errorf("kubectl describe node shows neither the condition nor the taint")
	}

	start = time.Now()
	c.Node.SetGUID(vf, vf.NodeGUID)
	if _, err := c.waitNodeHealth(ctx, corev1.ConditionTrue, "", ""); err != nil {
		t.Fatal(err)
	}
	figf("9 node condition", "GUID mended to condition True and taint removed", "%.1f s", time.Since(start).Seconds())
	if _, err := c.WaitRunning(ctx, name, 90*time.Second); err != nil {
		t.Errorf("the pod kept off the tainted node does not run once the taint is gone: %v", err)
	}
	for _, reason := range []string{"SRIOVVFsUnhealthy", "SRIOVVFsHealthy"} {
		if evs, err := c.EventsOf(ctx, "Node", kubecluster.NodeName, reason); err != nil || len(evs) == 0 {
			t.Errorf("no %s event on the node (%v)", reason, err)
		}
	}
	c.showKubectl(t, "get", "events", "-n", "default", "--field-selector", "involvedObject.kind=Node,source=sriov-stable-agent")
	agentLogClean(t, ds)
}

// waitNodeHealth waits until the node's condition has the status (and,
// when not empty, the reason) and, for status False, the node carries the
// taint with the value taint; for True, no taint.
func (c *cluster) waitNodeHealth(ctx context.Context, status corev1.ConditionStatus, reason, taint string) (*corev1.NodeCondition, error) {
	var cond *corev1.NodeCondition
	err := kubecluster.WaitFor(3*doctorInterval+20*time.Second, 250*time.Millisecond, fmt.Sprintf("%s=%s %s", conditionType, status, reason), func() (bool, error) {
		got, n, err := c.NodeCondition(ctx, conditionType)
		if err != nil {
			return false, err
		}
		if got == nil {
			return false, fmt.Errorf("no %s condition on the node", conditionType)
		}
		cond = got
		tainted := kubecluster.NodeTaint(n, taintKey)
		switch {
		case got.Status != status || reason != "" && got.Reason != reason:
			return false, fmt.Errorf("%s=%s (%s): %s", conditionType, got.Status, got.Reason, got.Message)
		case taint == "" && tainted != nil:
			return false, fmt.Errorf("tainted %s", tainted.ToString())
		case taint != "" && (tainted == nil || tainted.Value != taint || tainted.Effect != corev1.TaintEffectNoSchedule):
			return false, fmt.Errorf("taint %v, want %s=%s:NoSchedule", tainted, taintKey, taint)
		}
		return true, nil
	})
	return cond, err
}

// untaint removes the agent's taint from the node if a failed scenario
// left it (the agent without --taint-on-error leaves it alone).
func (c *cluster) untaint(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	if kubecluster.NodeTaint(n, taintKey) == nil {
		return
	}
	var keep []corev1.Taint
	for _, tt := range n.Spec.Taints {
		if tt.Key != taintKey {
			keep = append(keep, tt)
		}
	}
	n.Spec.Taints = keep
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}
