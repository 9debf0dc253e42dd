//go:build clustere2e

package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// TestS0PlainPod: a pod on the primary network alone (Multus delegating to
// bridge + host-local) runs and is deleted: the cluster itself works before
// any scenario uses it.
func TestS0PlainPod(t *testing.T) {
	c := mustCluster(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec("plain", "", "")); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitRunning(ctx, "plain", 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	figf("cluster", "first pod (primary network only) create to Ready", "%s", ms(time.Since(start)))
	if _, err := c.PodNetns(p); err != nil {
		t.Error(err)
	}
	if err := c.DeletePods(ctx, 60*time.Second, "plain"); err != nil {
		t.Fatal(err)
	}
}
