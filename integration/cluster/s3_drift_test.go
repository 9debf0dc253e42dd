//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
)

// record is the part of the plugin's attachment record the tests read.
type record struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	PCI         string `json:"pci"`
	// FoundAs is the name ADD found the VF under, AddedAltName whether ADD
	// added its altname.
	FoundAs      string `json:"foundAs"`
	AddedAltName bool   `json:"addedAltName"`
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

// driftBound is how soon after a rename the monitor must report it: its
// link notifications see it at once, where the shipped sweep interval is
// 30 s.
const driftBound = 2 * time.Second

// drift is scraped this often while waiting for the rename to show: the
// figure is the first scrape that shows it, so at most this much late.
const driftPoll = 20 * time.Millisecond

// shippedMonitor is the monitor container of deploy/daemonset as shipped:
// rendered from the repository's kustomization itself, no overlay.
func shippedMonitor(t *testing.T) corev1.Container {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(*repoRoot, "deploy", "daemonset"))
	if err != nil {
		t.Fatalf("kustomize build deploy/daemonset: %v", err)
	}
	for _, r := range resMap.Resources() {
		if r.GetKind() != "DaemonSet" {
			continue
		}
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(b, &ds); err != nil {
			t.Fatal(err)
		}
		for _, ctr := range ds.Spec.Template.Spec.Containers {
			if ctr.Name == "monitor" {
				return ctr
			}
		}
	}
	t.Fatal("deploy/daemonset renders no DaemonSet with a monitor container")
	return corev1.Container{}
}

// flagValue is the value of --name=value among args ("" without one).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestS3DriftAndDelete: net1 renamed inside a running pod shows in the
// metrics of the monitor, running in the DaemonSet as shipped (its command,
// arguments and so its 30 s sweep interval unchanged), within driftBound,
// with no sweep in between: its link notifications saw it. The series
// names the pod's namespace and name, the log the attachment's container
// ID. Deleting the pods brings every VF back to the node under its host
// name and leaves no record.
func TestS3DriftAndDelete(t *testing.T) {
	c := mustCluster(t)
	c.ensureEightPods(t)
	ctx := context.Background()
	pod, err := c.Client.CoreV1().Pods(kubecluster.Namespace).Get(ctx, eightPods[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := kubecluster.Allocations(ctx, kubecluster.ResourceVF)
	if err != nil {
		t.Fatal(err)
	}
	pci := alloc[pod.Name][0]
	netns, err := c.PodNetns(pod)
	if err != nil {
		t.Fatal(err)
	}
	rec := recordOf(t, pci)
	ds, err := c.daemonSetPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shipped := shippedMonitor(t)
	running := ds.Spec.Containers[slices.IndexFunc(ds.Spec.Containers, func(c corev1.Container) bool { return c.Name == "monitor" })]
	if !slices.Equal(running.Command, shipped.Command) || !slices.Equal(running.Args, shipped.Args) {
		t.Fatalf("the monitor runs %q %q, not as shipped: %q %q", running.Command, running.Args, shipped.Command, shipped.Args)
	}
	interval, err := time.ParseDuration(flagValue(shipped.Args, "interval"))
	if err != nil {
		t.Fatalf("the shipped monitor's --interval: %v", err)
	}
	if interval < 5*driftBound {
		t.Fatalf("the shipped sweep interval %v is too short to tell event-driven detection (within %v) from a sweep", interval, driftBound)
	}
	series := promtext.Series("sriov_stable_attachment_drift", "network", pod.Annotations[nadv1.NetworkAttachmentAnnot], "reason", "renamed")
	sweeps := promtext.Series("sriov_stable_sweeps_total")
	linkEvents := promtext.Series("sriov_stable_events_total", "source", "link")
	before, err := c.awayFromSweep(ds, interval)
	if err != nil {
		t.Fatal(err)
	}
	if before[series] != 0 {
		t.Fatalf("drift before the rename:\n%s", before.Dump("sriov_stable_attachment"))
	}
	if err := kubecluster.RenameIn(netns, "net1", "drift0"); err != nil {
		t.Fatal(err)
	}
	renamed := time.Now()
	var m promtext.Metrics
	err = kubecluster.WaitFor(interval+15*time.Second, driftPoll, "the monitor reports the rename", func() (bool, error) {
		m, err = scrape(ds)
		return err == nil && m.Is(series, 1), err
	})
	took := time.Since(renamed)
	if err != nil {
		t.Fatalf("%v\n%s", err, m.Dump("sriov_stable_attachment"))
	}
	figf("3 drift", "net1 renamed in a pod to drift in /metrics (shipped DaemonSet)", "%d ms (bound %v; scraped every %v; sweep interval %v, sweeps %v to %v, link events %v to %v)",
		took.Milliseconds(), driftBound, driftPoll, interval, before[sweeps], m[sweeps], before[linkEvents], m[linkEvents])
	if took > driftBound {
		t.Errorf("the monitor reported the rename %v after it, over the bound %v", took.Round(time.Millisecond), driftBound)
	}
	if m[sweeps] != before[sweeps] {
		t.Errorf("a sweep ran between the rename and its report (%s %v, then %v): this run does not show the link event finding it",
			sweeps, before[sweeps], m[sweeps])
	}
	if m[linkEvents] <= before[linkEvents] {
		t.Errorf("no link event counted for the rename (%s %v, then %v)", linkEvents, before[linkEvents], m[linkEvents])
	}
	log := kubecluster.ContainerLog(ds, "monitor")
	if !logHas(log, "drift detected", "containerID="+rec.ContainerID, "reason=renamed") {
		t.Errorf("the monitor's log has no drift line for container %s:\n%s", rec.ContainerID, kubecluster.LastLines(log, 20))
	}
	// The attachment's own series names the pod (issue 17).
	withPod := promtext.Series("sriov_stable_attachment_drift_reasons", "network", pod.Annotations[nadv1.NetworkAttachmentAnnot], "reason", "renamed",
		"namespace", pod.Namespace, "pod", pod.Name, "container_id", rec.ContainerID, "ifname", "net1", "pci", pci)
	if !m.Is(withPod, 1) {
		t.Errorf("no %s:\n%s", withPod, m.Dump("sriov_stable_attachment"))
	}

	start := time.Now()
	if err := c.DeletePods(ctx, 120*time.Second, eightPods...); err != nil {
		t.Fatal(err)
	}
	eightPods = nil
	figf("3 drift", "8 pods (one renamed) deleted to gone", "%.1f s", time.Since(start).Seconds())
	if missing := c.Node.VFsHome(); len(missing) > 0 {
		t.Errorf("VFs not back under their host name: %s", strings.Join(missing, ", "))
	}
	if recs := records(t); len(recs) > 0 {
		t.Errorf("%d records left: %v", len(recs), recs)
	}
}

// awayFromSweep scrapes the monitor at a moment its next sweep is at least
// a few seconds away: right after a sweep when the last one is older than
// interval less 5 s (sweeps run every interval). It returns that scrape.
func (c *cluster) awayFromSweep(ds *corev1.Pod, interval time.Duration) (promtext.Metrics, error) {
	m, err := scrape(ds)
	if err != nil {
		return nil, err
	}
	last := time.Unix(int64(m[promtext.Series("sriov_stable_last_sweep_timestamp_seconds")]), 0)
	if time.Since(last) < interval-5*time.Second {
		return m, nil
	}
	sweeps := promtext.Series("sriov_stable_sweeps_total")
	n := m[sweeps]
	err = kubecluster.WaitFor(interval+10*time.Second, 100*time.Millisecond, "the next sweep", func() (bool, error) {
		m, err = scrape(ds)
		return err == nil && m[sweeps] > n, err
	})
	return m, err
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
