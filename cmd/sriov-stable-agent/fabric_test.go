package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/ledger"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
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
