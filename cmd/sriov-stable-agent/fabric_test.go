package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/controller"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabrictest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/ledger"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/nodesync"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/publish"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The report has a row per wrong GUID, holders in publishing order, at
// most three named (one GUID list copied to 50 nodes stays one line), and
// a summary; a clean fabric says so in one line.
func TestFabricReport(t *testing.T) {
	l := ledger.New()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 50 {
		v := v1alpha1.VF{PCI: "0000:18:00.2", PF: "0000:18:00.0", NodeGUID: "a288:c2ff:fe18:0000", Since: metav1.NewTime(t0.Add(time.Duration(i) * time.Second))}
		if i == 0 {
			v.Pod = &v1alpha1.PodRef{Namespace: "train", Name: "nccl-0"}
		}
		l.Set(fmt.Sprintf("gpu-%02d", i), []v1alpha1.VF{v, {PCI: "0000:18:00.3", PF: "0000:18:00.0", NodeGUID: "0000:0000:0000:0000", Since: metav1.NewTime(t0)}})
	}
	var out bytes.Buffer
	writeReport(&out, l.Conflicts(), l.Stats())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+1+50+1 {
		t.Fatalf("%d lines, want a header, one duplicate row, 50 invalid rows and a summary:\n%s", len(lines), out.String())
	}
	dup := strings.Fields(lines[1])
	want := "DuplicateNodeGUID a288:c2ff:fe18:0000 gpu-00 0000:18:00.2 pod train/nccl-0 | gpu-01 0000:18:00.2 | gpu-02 0000:18:00.2 | +47 more"
	if strings.Join(dup, " ") != want {
		t.Errorf("duplicate row\n got %q\nwant %q", strings.Join(dup, " "), want)
	}
	if !strings.HasPrefix(lines[2], "InvalidGUID (node GUID)") || !strings.HasPrefix(lines[52], "51 conflicts over 50 nodes, 100 VFs") {
		t.Errorf("rows:\n%s", out.String())
	}
	out.Reset()
	writeReport(&out, nil, ledger.Stats{Nodes: 3, VFs: 192})
	if got := out.String(); got != "no duplicate or invalid GUIDs: 3 nodes, 192 VFs\n" {
		t.Errorf("clean fabric: %q", got)
	}
}

// The node agent's fabric metrics follow its syncer: one apply of the
// fixture's VFs, their count, no verdict, nothing failing.
func TestNodeFabricMetrics(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	api := fabrictest.New(t, publish.FieldManager, controller.FieldManager)
	s, err := nodesync.New(nodesync.Config{Client: api, Node: "gpu-a", NodeUID: func() (types.UID, bool) { return "uid-a", true },
		Sysfs: sysfs.Reader{Root: n.Root}, Store: state.NewStore(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for st := s.Snapshot(); st.Applies == 0 || len(st.Err) > 0; st = s.Snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("not published within 5 s: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(nodeFabricCollector{s})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	vfs := float64(len(n.PFs) * len(n.PFs[0].VFs))
	for name, want := range map[string]float64{"sriov_stable_fabric_publishes_total": 1, "sriov_stable_fabric_published_vfs": vfs,
		"sriov_stable_fabric_verdict_vfs": 0, "sriov_stable_fabric_sync_failing{work=spec}": 0, "sriov_stable_fabric_sync_failing{work=verdicts}": 0} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
	if v := got["sriov_stable_fabric_last_publish_timestamp_seconds"]; v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last publish timestamp %v, want about now", v)
	}
	if got["sriov_stable_fabric_identity_reads_total"] < 1 {
		t.Errorf("identity reads %v, want at least the one published", got["sriov_stable_fabric_identity_reads_total"])
	}
}
