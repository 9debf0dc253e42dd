package kubereport

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func newFinding(sev doctor.Severity, check, subject string) doctor.Finding {
	return doctor.Finding{Severity: sev, Check: check, Subject: subject, Message: check + " of " + subject}
}

func TestNodeCondition(t *testing.T) {
	E, W, I := doctor.SeverityError, doctor.SeverityWarning, doctor.SeverityInfo
	var many []doctor.Finding
	for i := range 10 {
		many = append(many, newFinding(E, finding.CheckGUIDInvalid, "0000:c0:05."+string(rune('0'+i))))
	}
	for _, tc := range []struct {
		name     string
		findings []doctor.Finding
		want     corev1.NodeCondition
		taint    *corev1.Taint
	}{{
		name: "healthy",
		want: corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue, Reason: "VFsHealthy",
			Message: "no errors or warnings on 8 PFs and 64 VFs"},
	}, {
		name:     "information only",
		findings: []doctor.Finding{newFinding(I, finding.CheckKernelLog, "node")},
		want: corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue, Reason: "VFsHealthy",
			Message: "no errors or warnings on 8 PFs and 64 VFs"},
	}, {
		name:     "warnings",
		findings: []doctor.Finding{newFinding(W, finding.CheckFirmwareVersion, "0000:18:00.0"), newFinding(W, finding.CheckFirmwareVersion, "0000:18:00.1")},
		want: corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue, Reason: "FirmwareVersion",
			Message: "no errors; 2 warnings: firmware-version 0000:18:00.0, 0000:18:00.1 (sriov-stable-agent doctor on the node gives the remedies)"},
	}, {
		name: "errors grouped by check, each subject once, warnings counted",
		findings: []doctor.Finding{
			newFinding(E, finding.CheckGUIDDuplicate, "0000:18:00.2"), newFinding(E, finding.CheckGUIDDuplicate, "0000:18:00.3"),
			newFinding(E, finding.CheckGUIDInvalid, "0000:c0:05.1"), newFinding(E, finding.CheckGUIDInvalid, "0000:c0:05.1"),
			newFinding(E, finding.CheckPortState, "0000:40:00.0"), newFinding(W, finding.CheckFirmwareVersion, "0000:18:00.0"),
		},
		want: corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionFalse, Reason: "GUIDDuplicate",
			Message: "4 errors: guid-duplicate 0000:18:00.2, 0000:18:00.3; guid-invalid 0000:c0:05.1; port-state 0000:40:00.0; " +
				"and 1 warning (sriov-stable-agent doctor on the node gives the remedies)"},
		taint: &corev1.Taint{Key: "sriov-stable-cni.io/vf-unhealthy", Value: "guid-duplicate", Effect: corev1.TaintEffectNoSchedule},
	}, {
		name:     "many subjects are counted",
		findings: many,
		want: corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionFalse, Reason: "GUIDInvalid",
			Message: "10 errors: guid-invalid 0000:c0:05.0, 0000:c0:05.1, 0000:c0:05.2, 0000:c0:05.3, 0000:c0:05.4, 0000:c0:05.5, " +
				"0000:c0:05.6, 0000:c0:05.7 and 2 more (sriov-stable-agent doctor on the node gives the remedies)"},
		taint: &corev1.Taint{Key: "sriov-stable-cni.io/vf-unhealthy", Value: "guid-invalid", Effect: corev1.TaintEffectNoSchedule},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &doctor.Report{PFs: 8, VFs: 64, Findings: tc.findings}
			if diff := cmp.Diff(tc.want, nodeCondition(rep)); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.taint, nodeTaint(rep)); diff != "" {
				t.Errorf("taint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	for check, want := range map[string]string{
		finding.CheckGUIDInvalid: "GUIDInvalid", finding.CheckPortState: "PortState", finding.CheckSRIOVNumVFs: "SRIOVNumVFs",
		finding.CheckVFAltName: "VFAltName", finding.CheckRDMADevice: "RDMADevice", finding.CheckDriverKernelMismatch: "DriverKernelMismatch",
	} {
		if got := reasonOf(check); got != want {
			t.Errorf("reasonOf(%q) = %q, want %q", check, got, want)
		}
	}
}

func TestPodEvents(t *testing.T) {
	rec := &state.Record{Network: "ib-vf", ContainerID: "c1", IfName: "net1", PCI: "0000:18:00.2",
		PodNamespace: "e2e", PodName: "vf-0", PodUID: "5f0c"}
	want := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "e2e", Name: "vf-0", UID: "5f0c"}
	if diff := cmp.Diff(want, podRef(rec)); diff != "" {
		t.Errorf("involved object (-want +got):\n%s", diff)
	}
	if ref := podRef(&state.Record{Network: "ib-vf", PCI: "0000:18:00.2"}); ref != nil {
		t.Errorf("a record without the pod's identity gives involved object %+v, want none", ref)
	}
	got := driftMessage(rec, []drift.Finding{{Reason: drift.Renamed, Detail: "VF 0000:18:00.2 is named drift0, expected net1"},
		{Reason: drift.PortDown, Detail: "port 1 of mlx5_10 is 1: DOWN"}})
	if w := "VF 0000:18:00.2 (net1, network ib-vf) drifted: renamed: VF 0000:18:00.2 is named drift0, expected net1; " +
		"port-down: port 1 of mlx5_10 is 1: DOWN"; got != w {
		t.Errorf("drift message\n got %q\nwant %q", got, w)
	}
	if got, w := recoveredMessage(rec, []drift.Reason{drift.Renamed, drift.PortDown}),
		"VF 0000:18:00.2 (net1, network ib-vf) recovered from: renamed, port-down"; got != w {
		t.Errorf("recovered message\n got %q\nwant %q", got, w)
	}
	long := clip(strings.Repeat("é", 1000))
	if len(long) > maxEventMessage || !strings.HasSuffix(long, " …") || !strings.HasPrefix(long, "éé") {
		t.Errorf("clip kept %d bytes ending %q", len(long), long[len(long)-8:])
	}
}

func TestVFProblems(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf := n.PFs[1]
	E, W := doctor.SeverityError, doctor.SeverityWarning
	rep := &doctor.Report{Findings: []doctor.Finding{
		newFinding(E, finding.CheckGUIDInvalid, pf.VFs[0].PCI),
		newFinding(E, finding.CheckGUIDDuplicate, pf.VFs[0].PCI),        // same key: the first stays
		covering(newFinding(E, finding.CheckPortState, pf.PCI), pf.VFs), // the PF's port: every VF of it
		newFinding(E, finding.CheckLinkLayer, n.PFs[2].VFs[3].PCI),
		newFinding(E, finding.CheckGUIDInvalid, n.PFs[2].PCI), // a PF's own GUID: not its VFs'
		newFinding(W, finding.CheckPortState, n.PFs[3].VFs[0].PCI),
		newFinding(E, finding.CheckFirmwareVersion, n.PFs[3].VFs[1].PCI),
	}}
	got := vfProblems(rep)
	portDown := problem{value: "not-active", message: "PF " + pf.PCI + ": port-state of " + pf.PCI}
	want := map[string]map[string]problem{
		pf.PCI:              {finding.TaintPortState: {value: "not-active", message: "port-state of " + pf.PCI}},
		n.PFs[2].VFs[3].PCI: {finding.TaintLinkLayer: {value: "mismatch", message: "link-layer of " + n.PFs[2].VFs[3].PCI}},
		n.PFs[2].PCI:        {finding.TaintGUID: {value: "invalid", message: "guid-invalid of " + n.PFs[2].PCI}},
	}
	for _, vf := range pf.VFs {
		want[vf.PCI] = map[string]problem{finding.TaintPortState: portDown}
	}
	want[pf.VFs[0].PCI][finding.TaintGUID] = problem{value: "invalid", message: "guid-invalid of " + pf.VFs[0].PCI}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(problem{})); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// The registry's device taints are ours to set: keys under Domain, keys
// and values valid as Kubernetes taints.
func TestRegisteredDeviceTaints(t *testing.T) {
	n := 0
	for _, c := range finding.All() {
		tt := c.DeviceTaint
		if tt == nil {
			continue
		}
		n++
		if !strings.HasPrefix(tt.Key, Domain+"/") || len(validation.IsQualifiedName(tt.Key)) > 0 || len(validation.IsValidLabelValue(tt.Value)) > 0 {
			t.Errorf("check %s: device taint %s=%s is not a taint of %s", c.Name, tt.Key, tt.Value, Domain)
		}
	}
	if n == 0 {
		t.Error("no registered check names a device taint")
	}
}

func str(s string) *string { return &s }

// covering is a PF's finding as the doctor reports it: covering its VFs.
func covering(f doctor.Finding, vfs []sysfstest.DGXVF) doctor.Finding {
	for _, vf := range vfs {
		f.Covers = append(f.Covers, vf.PCI)
	}
	return f
}

func TestPCIDevices(t *testing.T) {
	const driver = "sriovnetwork.k8snetworkplumbingwg.io"
	slices := []resourcev1.ResourceSlice{{
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: "node-a"}, Devices: []resourcev1.Device{
			{Name: "0000-18-00-2", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				driver + "/pciAddress": {StringValue: str("0000:18:00.2")}}},
			{Name: "vf-3", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": {StringValue: str("0000:18:00.3")},
				driver + "/pciAddress":            {StringValue: str("ignored: the standard attribute comes first")}}},
			{Name: "vf-4", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"pciAddress": {StringValue: str("18:00.4")}}},
			{Name: "gpu", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"index": {IntValue: new(int64)}}},
			{Name: "other", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"example.com/pciAddress": {StringValue: str("0000:18:00.5")}}},
		}},
	}}
	want := []device{
		{driver, "node-a", "0000-18-00-2", "0000:18:00.2"},
		{driver, "node-a", "vf-3", "0000:18:00.3"},
		{driver, "node-a", "vf-4", "0000:18:00.4"},
	}
	if diff := cmp.Diff(want, pciDevices(slices), cmp.AllowUnexported(device{})); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

func TestDesiredRules(t *testing.T) {
	const driver = "sriovnetwork.k8snetworkplumbingwg.io"
	devs := []device{{driver, "sriov-e2e-node", "vf-a", "0000:c0:03.1"}, {driver, "sriov-e2e-node", "vf-b", "0000:c0:03.2"}}
	problems := map[string]map[string]problem{
		"0000:c0:03.2": {finding.TaintGUID: {value: "invalid", message: "node GUID is zero"},
			finding.TaintPortState: {value: "not-active", message: "port 1 is DOWN"}},
		"0000:99:00.0": {finding.TaintGUID: {value: "invalid", message: "not published: no rule"}},
	}
	got := desiredRules("sriov-e2e-node", "uid-1", resourcev1.DeviceTaintEffectNoSchedule, devs, problems)
	if len(got) != 2 {
		t.Fatalf("%d rules, want 2 (one per problem of the published unhealthy VF): %v", len(got), got)
	}
	for name, rule := range got {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || !strings.HasPrefix(name, "sriov-stable-sriov-e2e-node-vf-b-") {
			t.Errorf("rule name %q: %v", name, errs)
		}
		want := resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: str(driver), Pool: str("sriov-e2e-node"), Device: str("vf-b")},
			Taint:          rule.Spec.Taint,
		}
		if diff := cmp.Diff(want, rule.Spec); diff != "" {
			t.Errorf("rule %s spec (-want +got):\n%s", name, diff)
		}
		if p, ok := problems["0000:c0:03.2"][rule.Spec.Taint.Key]; !ok || rule.Spec.Taint.Value != p.value ||
			rule.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule || rule.Annotations[annotationReason] != p.message {
			t.Errorf("rule %s taint %+v, annotations %v", name, rule.Spec.Taint, rule.Annotations)
		}
		owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "sriov-e2e-node", UID: "uid-1"}}
		if diff := cmp.Diff(owner, rule.OwnerReferences); diff != "" {
			t.Errorf("rule %s owner (-want +got):\n%s", name, diff)
		}
		if !sameRule(rule, rule) {
			t.Errorf("rule %s is not the same as itself", name)
		}
		changed := rule.DeepCopy()
		changed.Spec.Taint.Value = "duplicate"
		if sameRule(changed, rule) {
			t.Errorf("rule %s with another taint value counts as the same", name)
		}
	}
	for _, rule := range desiredRules("sriov-e2e-node", "uid-1", resourcev1.DeviceTaintEffectNone, devs, problems) {
		if rule.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNone {
			t.Errorf("rule %s with the effect None configured: taint %+v", rule.Name, rule.Spec.Taint)
		}
	}
	long := strings.Repeat("n", 250)
	if name := ruleName(long, devs[0], finding.TaintGUID); len(validation.IsDNS1123Subdomain(name)) > 0 {
		t.Errorf("rule name for a long node name %q is not a DNS subdomain", name)
	}
	if v := labelValue(long); len(validation.IsValidLabelValue(v)) > 0 {
		t.Errorf("label value %q for a long node name is not a label value", v)
	}
}
