//go:build clustere2e

package cluster

import (
	"context"
	"testing"
	"time"
)

// TestS0PlainPod: a pod on the primary network alone (Multus delegating to
// bridge + host-local) runs and is deleted: the cluster itself works before
// any scenario uses it.
func TestS0PlainPod(t *testing.T) {
	c := mustCluster(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := c.createPod(ctx, podSpec("plain", "", "")); err != nil {
		t.Fatal(err)
	}
	p, err := c.waitRunning(ctx, "plain", 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	figf("cluster", "first pod (primary network only) create to Ready", "%s", ms(time.Since(start)))
	if _, err := c.podNetns(p); err != nil {
		t.Error(err)
	}
	if err := c.deletePods(ctx, 60*time.Second, "plain"); err != nil {
		t.Fatal(err)
	}
}
