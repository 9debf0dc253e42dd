//go:build clustere2e

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/bundle"
)

// TestSFSupportBundle (scenario 15): the support bundle as an operator
// takes it, kubectl exec into the shipped DaemonSet's monitor container
// streaming `sriov-stable-agent bundle -o -`: it holds the fixture node's
// 64 VFs with their GUIDs, the record of a pod holding a VF, the agent's
// own /metrics and the doctor's report, and names what the container
// cannot see.
func TestSFSupportBundle(t *testing.T) {
	c := mustCluster(t)
	c.ensureNADs(t)
	ds := c.ensureReporting(t, componentReporting, false)
	ctx := context.Background()
	t.Cleanup(func() { _ = c.DeletePods(ctx, 60*time.Second, "bundle-1") })
	pods, _, err := c.startPods(ctx, []string{"bundle-1"}, nadVF, kubecluster.ResourceVF, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := kubecluster.Allocations(ctx, kubecluster.ResourceVF)
	if err != nil {
		t.Fatal(err)
	}
	if len(alloc[pods[0].Name]) != 1 {
		t.Fatalf("pod bundle-1 holds %v of %s, want one VF", alloc[pods[0].Name], kubecluster.ResourceVF)
	}
	pci := alloc[pods[0].Name][0]

	var out bytes.Buffer
	start := time.Now()
	stderr, err := c.KubectlTo(&out, "exec", "-n", daemonSetNamespace, ds.Name, "-c", "monitor", "--",
		"/usr/bin/sriov-stable-agent", "bundle", "-o", "-")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("kubectl exec … sriov-stable-agent bundle -o - (%d bytes, %s) said:\n%s", out.Len(), took.Round(time.Millisecond), stderr)
	files := untar(t, out.Bytes())

	var fns []struct {
		Addr, PF string
		RDMA     []struct{ NodeGUID string }
	}
	if err := json.Unmarshal(files["sysfs/functions.json"], &fns); err != nil {
		t.Fatalf("sysfs/functions.json: %v", err)
	}
	guids := map[string]string{}
	for _, f := range fns {
		if f.PF != "" && len(f.RDMA) == 1 {
			guids[f.Addr] = f.RDMA[0].NodeGUID
		}
	}
	for _, vf := range c.Node.VFs {
		want := vf.NodeGUID
		if vf.PCI == c.Node.ZeroGUID.PCI {
			want = kubecluster.UnsetGUID
		}
		if guids[vf.PCI] != want {
			t.Errorf("VF %s: GUID %q in the bundle, the fixture has %q", vf.PCI, guids[vf.PCI], want)
		}
	}
	found := false
	for name, data := range files {
		if strings.HasPrefix(name, "state/attachments/") && strings.Contains(string(data), pci) && strings.Contains(string(data), "bundle-1") {
			found = true
		}
	}
	if !found {
		t.Errorf("no record of pod bundle-1 on VF %s in the bundle", pci)
	}
	if !strings.Contains(string(files["metrics.txt"]), "sriov_stable_attachments{") {
		t.Errorf("metrics.txt has no sriov_stable_attachments: %.300s", files["metrics.txt"])
	}
	if !strings.Contains(string(files["doctor.json"]), "guid-invalid") {
		t.Errorf("doctor.json does not report the zero-GUID VF: %.300s", files["doctor.json"])
	}
	var man struct{ Problems []string }
	if err := json.Unmarshal(files["MANIFEST.json"], &man); err != nil {
		t.Fatal(err)
	}
	t.Logf("not collected in the container: %v", man.Problems)
	figf("15 bundle", "kubectl exec into the monitor container", "%d files, %d KiB compressed in %.1f s; %d parts not collected",
		len(files), out.Len()>>10, took.Seconds(), len(man.Problems))
}

// untar is a bundle's files by name.
func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files, _, err := bundle.Read(bytes.NewReader(b), 1<<30)
	if err != nil {
		t.Fatalf("the bundle (%d bytes): %v", len(b), err)
	}
	return files
}
