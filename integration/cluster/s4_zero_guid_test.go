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

// TestS4ZeroGUID: a pod on the VF whose node GUID is zero does not start;
// kubelet's FailedCreatePodSandBox event (what kubectl describe pod shows)
// carries our error's message (error 102), with the VF, the netns and what
// was found. After the
// pod is deleted the VF is back on the node and no record is left.
func TestS4ZeroGUID(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ctx := context.Background()
	vf := c.Node.ZeroGUID
	start := time.Now()
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec("zero-guid", nadZeroGUID, kubecluster.ResourceZeroGUID)); err != nil {
		t.Fatal(err)
	}
	var event corev1.Event
	err := kubecluster.WaitFor(90*time.Second, 500*time.Millisecond, "a FailedCreatePodSandBox event with our error", func() (bool, error) {
		for _, e := range c.PodEvents(ctx, "zero-guid", corev1.EventTypeWarning) {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "VF "+vf.PCI) {
				event = e
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %s", c.PodTrouble("zero-guid"))
	})
	if err != nil {
		t.Fatal(err)
	}
	figf("4 zero GUID", "pod create to FailedCreatePodSandBox with our error", "%.1f s", time.Since(start).Seconds())
	t.Logf("kubectl describe pod zero-guid shows:\n  Warning  %s  %s", event.Reason, event.Message)
	for _, want := range []string{`plugin type="sriov-stable-cni" failed (add): error 102: VF ` + vf.PCI, "GUID"} {
		if !strings.Contains(event.Message, want) {
			t.Errorf("the event does not name %q: %s", want, event.Message)
		}
	}
	// Multus wraps a delegate's error as text ("error adding container to
	// network ...: %v") under a code of its own: our code reaches kubelet
	// because our message carries it. Our plugin's log has the failure too.
	log := kubecluster.ReadText(pluginLog)
	if !logHas(log, "level=ERROR", "command=ADD", vf.PCI) {
		t.Errorf("our plugin's log has no failed ADD for %s:\n%s", vf.PCI, kubecluster.LastLines(log, 10))
	}
	p, err := c.Client.CoreV1().Pods(kubecluster.Namespace).Get(ctx, "zero-guid", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("pod on the zero-GUID VF is %s, want Pending", p.Status.Phase)
	}
	if err := c.DeletePods(ctx, 60*time.Second, "zero-guid"); err != nil {
		t.Fatal(err)
	}
	if missing := c.Node.VFsHome(); len(missing) > 0 {
		t.Errorf("VFs not back under their host name: %s", strings.Join(missing, ", "))
	}
	if recs := records(t); len(recs) > 0 {
		t.Errorf("%d records left: %v", len(recs), recs)
	}
}
