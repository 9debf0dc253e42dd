package publish

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

var (
	t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

// On a DGX H200 node every VF is published with its own device's GUIDs,
// its card's system image GUID and port 1's state; a VF whose RDMA device
// is in its pod's netns (exclusive mode) is published from its record,
// with the pod and its card's system image GUID from the PF; a VF without
// any RDMA device is left out.
func TestIdentities(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	sys := sysfs.Reader{Root: n.Root}
	pf := n.PFs[2]
	attached, plain := pf.VFs[1], pf.VFs[5]
	n.HideRDMA(attached.PCI, attached.RDMA)
	n.HideRDMA(plain.PCI, plain.RDMA)
	n.SetPort(pf.VFs[0].PCI, pf.VFs[0].RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(pf.VFs[0].PortGUID)})
	rec := &state.Record{PCI: attached.PCI, NodeGUID: attached.NodeGUID, RDMA: []string{attached.RDMA}, LinkLayer: "infiniband",
		PodNamespace: "train", PodName: "nccl-3", PodUID: "0b7a"}
	got, err := Identities(sys, []*state.Record{rec}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(n.PFs)*len(pf.VFs) - 1; len(got) != want {
		t.Fatalf("%d VFs published, want %d (every VF but the one without an RDMA device)", len(got), want)
	}
	byPCI := map[string]v1alpha1.VF{}
	for i, v := range got {
		byPCI[v.PCI] = v
		if i > 0 && got[i-1].PCI >= v.PCI {
			t.Errorf("VFs not sorted by PCI: %s before %s", got[i-1].PCI, v.PCI)
		}
	}
	since := metav1.NewTime(t0)
	want := map[string]v1alpha1.VF{
		pf.VFs[2].PCI: {PCI: pf.VFs[2].PCI, PF: pf.PCI, RDMADevice: pf.VFs[2].RDMA, NodeGUID: pf.VFs[2].NodeGUID,
			PortGUIDs: []string{pf.VFs[2].PortGUID}, SysImageGUID: pf.SysImageGUID, LinkLayer: "InfiniBand", PortState: "ACTIVE", Since: since},
		pf.VFs[0].PCI: {PCI: pf.VFs[0].PCI, PF: pf.PCI, RDMADevice: pf.VFs[0].RDMA, NodeGUID: pf.VFs[0].NodeGUID,
			PortGUIDs: []string{pf.VFs[0].PortGUID}, SysImageGUID: pf.SysImageGUID, LinkLayer: "InfiniBand", PortState: "DOWN", Since: since},
		attached.PCI: {PCI: attached.PCI, PF: pf.PCI, RDMADevice: attached.RDMA, NodeGUID: attached.NodeGUID,
			SysImageGUID: pf.SysImageGUID, LinkLayer: "InfiniBand", Since: since,
			Pod: &v1alpha1.PodRef{Namespace: "train", Name: "nccl-3", UID: "0b7a"}},
	}
	for pci, w := range want {
		if diff := cmp.Diff(w, byPCI[pci]); diff != "" {
			t.Errorf("VF %s (-want +got):\n%s", pci, diff)
		}
	}
	if _, ok := byPCI[plain.PCI]; ok {
		t.Errorf("VF %s without an RDMA device or a record was published", plain.PCI)
	}

	// Published again an hour later: Since stays where the GUID did, and
	// moves where it changed.
	changed := pf.VFs[3]
	n.SetRDMA(changed.PCI, sysfstest.RDMA{Name: changed.RDMA, NodeGUID: "a288:c2ff:fe99:0001", SysImageGUID: pf.SysImageGUID})
	again, err := Identities(sys, []*state.Record{rec}, got, t1)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range again {
		wantSince := t0
		if v.PCI == changed.PCI {
			wantSince = t1
		}
		if !v.Since.Time.Equal(wantSince) {
			t.Errorf("VF %s (GUID %s): since %s, want %s", v.PCI, v.NodeGUID, v.Since.Time, wantSince)
		}
	}
}

// A function that cannot be read is named and the rest are published.
func TestIdentitiesUnreadable(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	bad := n.PFs[0].VFs[0]
	n.WriteFile(n.RDMAPath(bad.PCI, bad.RDMA)+"/node_guid", "not a guid")
	got, err := Identities(sysfs.Reader{Root: n.Root}, nil, nil, t0)
	if err == nil || !strings.Contains(err.Error(), bad.PCI) {
		t.Errorf("error %v, want one naming %s", err, bad.PCI)
	}
	if len(got) != 63 {
		t.Errorf("%d VFs published beside the unreadable one, want 63", len(got))
	}
}

// server keeps one object the way the API server does for an apply of
// spec: it stores what was sent (times at the second), and counts writes.
type server struct {
	obj     *v1alpha1.NodeVFSet
	patches []string
	fail    error
}

func (s *server) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1alpha1.NodeVFSet, error) {
	if s.obj == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.Group, Resource: v1alpha1.Resource}, name)
	}
	return s.obj.DeepCopy(), nil
}

func (s *server) Patch(_ context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*v1alpha1.NodeVFSet, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	if pt != types.ApplyPatchType || opts.FieldManager != FieldManager || opts.Force == nil || !*opts.Force || len(sub) > 0 {
		return nil, errors.New("not a forced apply of the object by the agent")
	}
	s.patches = append(s.patches, string(data))
	var obj v1alpha1.NodeVFSet
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	s.obj = &obj
	return obj.DeepCopy(), nil
}

// The publisher writes on change only: the first publish applies, the
// same VFs again write nothing, a change applies. What it applies is
// metadata (owned by the Node) and spec, never status.
func TestPublishOnChangeOnly(t *testing.T) {
	srv := &server{}
	p := New(srv, "gpu-7", "uid-7")
	vfs := []v1alpha1.VF{{PCI: "0000:18:00.2", NodeGUID: "a288:c2ff:fe18:0000", Since: metav1.NewTime(t0.Add(300 * time.Millisecond))}}
	for i, step := range []struct {
		vfs   []v1alpha1.VF
		wrote bool
	}{{vfs, true}, {vfs, false}, {[]v1alpha1.VF{{PCI: "0000:18:00.2", NodeGUID: "a288:c2ff:fe18:0001", Since: metav1.NewTime(t1)}}, true}, {nil, true}, {nil, false}} {
		wrote, err := p.Publish(t.Context(), step.vfs)
		if err != nil {
			t.Fatal(err)
		}
		if wrote != step.wrote {
			t.Errorf("step %d: wrote %v, want %v", i, wrote, step.wrote)
		}
	}
	if len(srv.patches) != 3 || p.Applies != 3 {
		t.Fatalf("%d applies (publisher counted %d), want 3", len(srv.patches), p.Applies)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(srv.patches[0]), &sent); err != nil {
		t.Fatal(err)
	}
	if _, ok := sent["status"]; ok {
		t.Errorf("the agent's apply names status: %s", srv.patches[0])
	}
	owner := srv.obj.OwnerReferences
	if len(owner) != 1 || owner[0].Kind != "Node" || owner[0].Name != "gpu-7" || owner[0].UID != "uid-7" {
		t.Errorf("owner references %+v, want the Node gpu-7", owner)
	}
	if srv.obj.Spec.VFs == nil || len(srv.obj.Spec.VFs) != 0 {
		t.Errorf("a node without VFs published %v, want an empty list (the CRD requires vfs)", srv.obj.Spec.VFs)
	}
}

// A restarted agent reads its object first: what it published before
// is not written again, and a failed write is an error naming the node.
func TestPublishAfterRestart(t *testing.T) {
	vfs := []v1alpha1.VF{{PCI: "0000:18:00.2", NodeGUID: "a288:c2ff:fe18:0000", Since: metav1.NewTime(t0)}}
	srv := &server{}
	if _, err := New(srv, "gpu-7", "uid-7").Publish(t.Context(), vfs); err != nil {
		t.Fatal(err)
	}
	p := New(srv, "gpu-7", "uid-7")
	prev, err := p.Published(t.Context())
	if err != nil || len(prev) != 1 || !prev[0].Since.Time.Equal(t0) {
		t.Fatalf("published before the restart: %v, %v; want the VF since %s", prev, err, t0)
	}
	if wrote, err := p.Publish(t.Context(), prev); wrote || err != nil {
		t.Errorf("publishing what the object holds: wrote %v, %v; want nothing written", wrote, err)
	}
	srv.fail = errors.New("etcdserver: request timed out")
	vfs[0].NodeGUID = "a288:c2ff:fe18:0009"
	if _, err := p.Publish(t.Context(), vfs); err == nil || !strings.Contains(err.Error(), "gpu-7") {
		t.Errorf("failed apply: %v, want an error naming the NodeVFSet", err)
	}
}

// BenchmarkIdentities: one read of a DGX H200 node's 64 VFs, what the
// agent does each publish interval.
func BenchmarkIdentities(b *testing.B) {
	n := sysfstest.NewDGXH200(b)
	sys := sysfs.Reader{Root: n.Root}
	prev, err := Identities(sys, nil, nil, t0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Identities(sys, nil, prev, t1); err != nil {
			b.Fatal(err)
		}
	}
}
