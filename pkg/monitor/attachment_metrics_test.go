package monitor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
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

// A label value that is not UTF-8 (a pod name or network with stray bytes,
// a doctor finding's subject read from sysfs) is escaped, byte by byte:
// the scrape answers 200 with every other series, two such values stay two
// series, and counting a drift of such a network does not panic.
func TestLabelsNotUTF8(t *testing.T) {
	f := newFixture(t, Config{Doctor: &doctor.Options{}})
	a := record("ib-\xc3", "c1", "/run/netns/pod1")
	a.PodNamespace, a.PodName = "e2e", "pod-\xff\xfe"
	b := record("ib-\xc3", "c2", "/run/netns/pod2")
	b.PodNamespace, b.PodName, b.PCI = "e2e", "pod-\xfe\xff", "0000:18:00.3"
	f.mon.apply([]*state.Record{a, b}, []outcome{{}, {}}, time.Now())
	f.mon.mu.Lock()
	f.mon.doctorAt = time.Now()
	f.mon.nodeRep = &doctor.Report{Findings: []doctor.Finding{{Check: doctor.CheckSysfs, Severity: doctor.SeverityError, Subject: "0000:18:00.\xff"}}}
	f.mon.mu.Unlock()

	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		f.mon.Handler(f.reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics: %d\n%s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	body := scrape()
	for _, want := range []string{
		`pod="pod-\\xff\\xfe"`, `pod="pod-\\xfe\\xff"`, `network="ib-\\xc3"`, `subject="0000:18:00.\\xff"`,
		`sriov_stable_attachments{network="ib-\\xc3",status="ok"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	f.mon.apply([]*state.Record{a, b}, []outcome{{findings: []drift.Finding{{Reason: drift.MTU, Detail: "1280"}}}, {}}, time.Now())
	if body := scrape(); !strings.Contains(body, `sriov_stable_drift_events_total{network="ib-\\xc3",reason="mtu"} 1`) {
		t.Errorf("the drift of a network named so is not counted:\n%s", body)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"ib-a": "ib-a", "pod-ü": "pod-ü", "\xff": `\xff`, "a\xc3": `a\xc3`, "\xe2\x82": `\xe2\x82`, "x\xffü\xfe": `x\xffü\xfe`,
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
