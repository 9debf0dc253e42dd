//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// maxLatencyRatio bounds pod create-to-Running with our plugin in the chain
// over the same NAD with host-device alone.
const maxLatencyRatio = 1.1

// TestS7StartLatency: pod create to Ready with [host-device,
// sriov-stable-cni] against [host-device] alone, one pod at a time,
// alternating the two NADs (and which goes first in each pair) in one run;
// the ratio of the medians stays within maxLatencyRatio.
func TestS7StartLatency(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ctx := context.Background()
	if *latencyPods < 20 {
		t.Fatalf("-cluster.latency-pods %d: the figure needs at least 20 pods per NAD", *latencyPods)
	}
	took := map[string][]time.Duration{}
	one := func(nad, name string) {
		start := time.Now()
		if _, err := c.CreatePod(ctx, kubecluster.PodSpec(name, nad, kubecluster.ResourceVF)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitRunning(ctx, name, 120*time.Second); err != nil {
			t.Fatal(err)
		}
		took[nad] = append(took[nad], time.Since(start))
		if err := c.DeletePods(ctx, 120*time.Second, name); err != nil {
			t.Fatal(err)
		}
	}
	for i := range *latencyPods {
		order := []string{nadVF, nadHostDev}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, nad := range order {
			one(nad, fmt.Sprintf("lat-%s-%d", nad, i))
		}
	}
	ours50, ours90 := quantiles(took[nadVF])
	hd50, hd90 := quantiles(took[nadHostDev])
	ratio := float64(ours50) / float64(hd50)
	figf("7 latency", "create to Ready, [host-device, sriov-stable-cni]", "p50 %s, p90 %s (%d pods)", ms(ours50), ms(ours90), len(took[nadVF]))
	figf("7 latency", "create to Ready, [host-device] alone", "p50 %s, p90 %s (%d pods)", ms(hd50), ms(hd90), len(took[nadHostDev]))
	figf("7 latency", "ratio of the medians (bound "+fmt.Sprint(maxLatencyRatio)+")", "%.3f", ratio)
	if ratio > maxLatencyRatio {
		t.Errorf("pods with our plugin start %.3f× as slow as with host-device alone, over the bound %.1f×", ratio, maxLatencyRatio)
	}
	c.checkNodeClean(t, "after the latency runs", false)
}
