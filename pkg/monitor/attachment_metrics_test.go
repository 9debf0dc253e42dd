package monitor

import (
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// Each attachment has its own series with its pod's identity; a record of
// an earlier release, without the pod, has them with empty pod labels.
// Drift reasons are 1 while drifting, 0 otherwise, and the series go with
// the record.
func TestPerAttachmentSeries(t *testing.T) {
	f := newFixture(t, Config{})
	withPod := record("ib-a", "c1", "/run/netns/pod1")
	withPod.PodNamespace, withPod.PodName, withPod.PodUID, withPod.NodeGUID = "e2e", "vf-0", "uid-0", "a288:c2ff:fe18:0000"
	old := record("ib-a", "c2", "/run/netns/pod2")
	old.PCI = "0000:18:00.3"
	id := func(r *state.Record) []string {
		return []string{"network", r.Network, "namespace", r.PodNamespace, "pod", r.PodName, "container_id", r.ContainerID,
			"ifname", r.IfName, "pci", r.PCI}
	}
	info := func(r *state.Record, status Status) []string {
		return append(id(r), "node_guid", r.NodeGUID, "status", string(status))
	}
	reason := func(r *state.Record, reason drift.Reason) []string { return append(id(r), "reason", string(reason)) }

	renamed := []drift.Finding{{Reason: drift.Renamed, Detail: "VF 0000:18:00.2 is named drift0, expected net1"},
		{Reason: drift.PortDown, Detail: "port down"}}
	f.mon.apply([]*state.Record{withPod, old}, []outcome{{findings: renamed}, {}}, time.Now())
	f.wantValue(t, 1, "sriov_stable_attachment_info", info(withPod, StatusDrifted)...)
	f.wantValue(t, 1, "sriov_stable_attachment_info", info(old, StatusOK)...)
	f.wantValue(t, 1, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.Renamed)...)
	f.wantValue(t, 1, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.PortDown)...)
	for _, r := range []drift.Reason{drift.MAC, drift.GUID} {
		f.wantValue(t, 0, "sriov_stable_attachment_drift_reasons", reason(withPod, r)...)
	}
	for _, r := range drift.Reasons {
		f.wantValue(t, 0, "sriov_stable_attachment_drift_reasons", reason(old, r)...)
	}

	f.mon.apply([]*state.Record{withPod}, []outcome{{}}, time.Now())
	f.wantValue(t, 1, "sriov_stable_attachment_info", info(withPod, StatusOK)...)
	f.wantValue(t, 0, "sriov_stable_attachment_drift_reasons", reason(withPod, drift.Renamed)...)
	for _, s := range [][]string{info(withPod, StatusDrifted), info(old, StatusOK)} {
		if _, ok := f.value(t, "sriov_stable_attachment_info", s...); ok {
			t.Errorf("series %v is left after the drift cleared or the record went", s)
		}
	}
	if _, ok := f.value(t, "sriov_stable_attachment_drift_reasons", reason(old, drift.Renamed)...); ok {
		t.Error("a drift series is left after the record went")
	}
}
