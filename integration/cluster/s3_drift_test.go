//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/promtext"
)

// record is the part of the plugin's attachment record the tests read.
type record struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	PCI         string `json:"pci"`
}

// recordOf returns the record of the attachment holding a VF.
func recordOf(t *testing.T, pci string) record {
	t.Helper()
	for _, path := range records(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.PCI == pci {
			return r
		}
	}
	t.Fatalf("no attachment record holds VF %s", pci)
	return record{}
}

// monitorInterval is the monitor's --interval in the DaemonSet.
func monitorInterval(t *testing.T, ds *corev1.Pod) time.Duration {
	t.Helper()
	for _, ctr := range ds.Spec.Containers {
		if ctr.Name != "monitor" {
			continue
		}
		for _, a := range ctr.Args {
			if v, ok := strings.CutPrefix(a, "--interval="); ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
	}
	t.Fatal("the DaemonSet's monitor has no --interval")
	return 0
}

// TestS3DriftAndDelete: net1 renamed inside a running pod shows in the
// monitor's metrics within one interval, with the pod's namespace and name
// (and in its log with the attachment's container ID); deleting the pods
// brings every VF back to the node under its host name and leaves no record.
func TestS3DriftAndDelete(t *testing.T) {
	c := mustCluster(t)
	c.ensureEightPods(t)
	ctx := context.Background()
	pod, err := c.client.CoreV1().Pods(testNamespace).Get(ctx, eightPods[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := allocations(ctx, resourceVF)
	if err != nil {
		t.Fatal(err)
	}
	pci := alloc[pod.Name][0]
	netns, err := c.podNetns(pod)
	if err != nil {
		t.Fatal(err)
	}
	rec := recordOf(t, pci)
	ds, err := c.daemonSetPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	interval := monitorInterval(t, ds)
	series := promtext.Series("sriov_stable_attachment_drift", "network", nadVF, "reason", "renamed")
	if m, err := scrape(ds); err != nil || m[series] != 0 {
		t.Fatalf("drift before the rename (%v):\n%s", err, m.Dump("sriov_stable_attachment"))
	}
	if err := renameIn(netns, "net1", "drift0"); err != nil {
		t.Fatal(err)
	}
	renamed := time.Now()
	var m promtext.Metrics
	err = waitFor(interval+15*time.Second, time.Second, "the monitor reports the rename", func() (bool, error) {
		m, err = scrape(ds)
		return err == nil && m.Is(series, 1), err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, m.Dump("sriov_stable_attachment"))
	}
	figf("3 drift", "net1 renamed in a pod to drift in /metrics", "%.1f s (interval %v)", time.Since(renamed).Seconds(), interval)
	log := containerLog(ds, "monitor")
	if !logHas(log, "drift detected", "containerID="+rec.ContainerID, "reason=renamed") {
		t.Errorf("the monitor's log has no drift line for container %s:\n%s", rec.ContainerID, lastLines(log, 20))
	}
	// The attachment's own series names the pod (issue 17).
	withPod := promtext.Series("sriov_stable_attachment_drift_reasons", "network", nadVF, "reason", "renamed",
		"namespace", pod.Namespace, "pod", pod.Name, "container_id", rec.ContainerID, "ifname", "net1", "pci", pci)
	if !m.Is(withPod, 1) {
		t.Errorf("no %s:\n%s", withPod, m.Dump("sriov_stable_attachment"))
	}

	start := time.Now()
	if err := c.deletePods(ctx, 120*time.Second, eightPods...); err != nil {
		t.Fatal(err)
	}
	eightPods = nil
	figf("3 drift", "8 pods (one renamed) deleted to gone", "%.1f s", time.Since(start).Seconds())
	if missing := c.node.vfsHome(); len(missing) > 0 {
		t.Errorf("VFs not back under their host name: %s", strings.Join(missing, ", "))
	}
	if recs := records(t); len(recs) > 0 {
		t.Errorf("%d records left: %v", len(recs), recs)
	}
}

// logHas tells whether one line of the log holds every part.
func logHas(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
