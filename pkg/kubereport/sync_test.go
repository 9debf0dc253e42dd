package kubereport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// These tests drive the real Reporter (Start, Doctor, Drift, Repaired,
// Stop) against client-go's fake clientset and read what it wrote from the
// fake's action log and object tracker.

const (
	testNode    = "sriov-node-a"
	testNodeUID = "0b5e2f4a-node"
	testDriver  = "sriovnetwork.k8snetworkplumbingwg.io"
	// waitTimeout bounds every poll; generous because the tests run under
	// -race on a loaded CI machine. A poll ends as soon as its condition holds.
	waitTimeout = 30 * time.Second
)

var (
	gvrRules  = resourcev1.SchemeGroupVersion.WithResource("devicetaintrules")
	gvrNodes  = corev1.SchemeGroupVersion.WithResource("nodes")
	gvrEvents = corev1.SchemeGroupVersion.WithResource("events")
)

// logLines collects the reporter's log records (slog JSON, one per Write).
type logLines struct{ testutil.LogBuffer }

// count is the number of records of level whose message starts with msg.
func (l *logLines) count(tb testing.TB, level slog.Level, msg string) int {
	tb.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if rec.Level == level.String() && strings.HasPrefix(rec.Msg, msg) {
			n++
		}
	}
	return n
}

// harness is a Reporter started on a fake clientset holding the node.
type harness struct {
	t       *testing.T
	cs      *fake.Clientset
	r       *Reporter
	logs    *logLines
	stopped bool
}

// testNodeObject is the node as the kubelet leaves it: Ready, with the
// taints given.
func testNodeObject(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: testNodeUID},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelet is posting ready status"}}},
	}
}

// newHarness creates objs (the node first) in a fake clientset, lets
// prepare add reactors, and starts a Reporter on it with cfg's other fields.
func newHarness(t *testing.T, cfg Config, prepare func(*fake.Clientset), objs ...runtime.Object) *harness {
	t.Helper()
	cs := fake.NewClientset(objs...)
	cs.Resources = servedDRA("v1", "v1")
	if prepare != nil {
		prepare(cs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{t: t, cs: cs, logs: &logLines{}}
	cfg.Client, cfg.NodeName = clientset{cs}, testNode
	cfg.Logger = slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	h.r = r
	t.Cleanup(h.stop)
	return h
}

// stop ends the reporter once: the worker first handles everything
// already queued, so after stop the action log is final; but events the
// broadcaster has not written yet are dropped, so wait for events before.
func (h *harness) stop() {
	if !h.stopped {
		h.stopped = true
		h.r.Stop()
	}
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, waitTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		h.t.Fatalf("waiting for %s: %v\nactions: %s\nlog:\n%s", what, err, h.describeActions(), h.logs)
	}
}

// count is the number of actions of verb on resource (and subresource).
func (h *harness) count(verb, resource, subresource string) int {
	n := 0
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

// writes lists the create, update, patch and delete actions on resource
// (any subresource), as "verb[/subresource] name".
func (h *harness) writes(resource string) []string {
	var out []string
	for _, a := range h.cs.Actions() {
		if a.GetResource().Resource != resource {
			continue
		}
		verb := a.GetVerb()
		if a.GetSubresource() != "" {
			verb += "/" + a.GetSubresource()
		}
		switch a := a.(type) {
		case k8stesting.CreateAction: // UpdateAction too: the same interface
			if o, ok := a.GetObject().(metav1.Object); ok {
				out = append(out, verb+" "+o.GetName())
			}
		case k8stesting.PatchAction:
			out = append(out, verb+" "+a.GetName())
		case k8stesting.DeleteAction:
			out = append(out, verb+" "+a.GetName())
		}
	}
	return out
}

func (h *harness) describeActions() string {
	var b strings.Builder
	for _, a := range h.cs.Actions() {
		fmt.Fprintf(&b, "\n  %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
	}
	return b.String()
}

// round hands the reporter a doctor report and waits until the worker has
// synced the node and the devices with it: rounds never coalesce, so each
// report is synced once. The devices' writes of the last round are final
// after stop, or once the next round returns.
func (h *harness) round(rep *doctor.Report) {
	h.t.Helper()
	h.r.Doctor(rep)
	_, gen := h.r.latest()
	h.waitFor("the sync of a doctor report", func() bool {
		return h.r.syncedReports(keyNode) >= gen && h.r.syncedReports(keyDevices) >= gen
	})
}

// servedDRA is the discovery of an API server that serves ResourceSlices
// at slices and DeviceTaintRules at rules ("" for not at all).
func servedDRA(slices, rules string) []*metav1.APIResourceList {
	var out []*metav1.APIResourceList
	for _, v := range []string{"v1", "v1beta2", "v1beta1", "v1alpha3"} {
		l := &metav1.APIResourceList{GroupVersion: resourcev1.GroupName + "/" + v}
		if v == slices {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: "resourceslices", Kind: "ResourceSlice", Verbs: []string{"list", "watch"}})
		}
		if v == rules {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: "devicetaintrules", Kind: "DeviceTaintRule",
				Verbs: []string{"create", "delete", "list", "update", "watch"}})
		}
		if len(l.APIResources) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// node is the node as the fake holds it now.
func (h *harness) node() *corev1.Node {
	h.t.Helper()
	o, err := h.cs.Tracker().Get(gvrNodes, "", testNode)
	if err != nil {
		h.t.Fatalf("node: %v", err)
	}
	return o.(*corev1.Node)
}

// condition is the node's SRIOVVFsHealthy condition, nil without one.
func (h *harness) condition() *corev1.NodeCondition {
	for _, c := range h.node().Status.Conditions {
		if c.Type == ConditionType {
			return &c
		}
	}
	return nil
}

// rules are the DeviceTaintRules the fake holds, by name.
func (h *harness) rules() map[string]resourcev1.DeviceTaintRule {
	h.t.Helper()
	o, err := h.cs.Tracker().List(gvrRules, resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule"), "")
	if err != nil {
		h.t.Fatalf("list DeviceTaintRules: %v", err)
	}
	out := map[string]resourcev1.DeviceTaintRule{}
	for _, r := range o.(*resourcev1.DeviceTaintRuleList).Items {
		out[r.Name] = r
	}
	return out
}

// ownRules are the rules labelled as this agent's for this node.
func (h *harness) ownRules() map[string]resourcev1.DeviceTaintRule {
	out := map[string]resourcev1.DeviceTaintRule{}
	for name, r := range h.rules() {
		if r.Labels[labelManagedBy] == Component && r.Labels[labelNode] == testNode {
			out[name] = r
		}
	}
	return out
}

// events are the events the fake holds about the object of kind in
// namespace (any namespace when empty) named name.
func (h *harness) events(kind, namespace, name string) []corev1.Event {
	h.t.Helper()
	o, err := h.cs.Tracker().List(gvrEvents, corev1.SchemeGroupVersion.WithKind("Event"), namespace)
	if err != nil {
		h.t.Fatalf("list events: %v", err)
	}
	var out []corev1.Event
	for _, e := range o.(*corev1.EventList).Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// eventSummary is what the tests compare of an event.
type eventSummary struct {
	Type, Reason string
	Object       corev1.ObjectReference
}

func summarize(evs []corev1.Event) []eventSummary {
	out := make([]eventSummary, len(evs))
	for i, e := range evs {
		out[i] = eventSummary{Type: e.Type, Reason: e.Reason, Object: e.InvolvedObject}
	}
	return out
}

// nodeEvents waits for n events on the node and returns them by first
// timestamp; an event the reporter should not have sent would be before the
// last of them (the broadcaster writes in order), so the caller can compare
// all of them.
func (h *harness) nodeEvents(n int) []eventSummary {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%d node events", n), func() bool { return len(h.events("Node", "", testNode)) >= n })
	evs := h.events("Node", "", testNode)
	sortEvents(evs)
	return summarize(evs)
}

// sortEvents orders events of one object as they were made: the recorder
// names each after its object and a hex timestamp in nanoseconds.
func sortEvents(evs []corev1.Event) {
	slices.SortFunc(evs, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
}

func nodeEvent(typ, reason string) eventSummary {
	return eventSummary{Type: typ, Reason: reason,
		Object: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: testNode, UID: testNodeUID}}
}

// pciSlice is a ResourceSlice of the node as dra-driver-sriov publishes
// one: a device per VF, named after its PCI address, with the driver's
// pciAddress attribute; every second device carries the standard
// resource.kubernetes.io/pciBusID instead.
func pciSlice(name string, pcis ...string) *resourcev1.ResourceSlice {
	node := testNode
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: testDriver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: testNode, ResourceSliceCount: 1}},
	}
	for i, pci := range pcis {
		attr := resourcev1.QualifiedName(testDriver + "/pciAddress")
		if i%2 == 1 {
			attr = pciBusIDAttribute
		}
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: deviceName(pci),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{attr: {StringValue: str(pci)}}})
	}
	return s
}

// deviceName is the device name dra-driver-sriov gives a VF: 0000-18-00-2.
func deviceName(pci string) string { return strings.NewReplacer(":", "-", ".", "-").Replace(pci) }

func vfPCIs(vfs []sysfstest.DGXVF) []string {
	out := make([]string, len(vfs))
	for i, vf := range vfs {
		out[i] = vf.PCI
	}
	return out
}

// foreignRule is a DeviceTaintRule someone else made for a device of the
// node: the agent must leave it alone.
func foreignRule(name string, labels map[string]string, pci string) *resourcev1.DeviceTaintRule {
	pool, dev := testNode, deviceName(pci)
	drv := testDriver
	return &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &drv, Pool: &pool, Device: &dev},
			Taint:          resourcev1.DeviceTaint{Key: "example.com/maintenance", Value: "planned", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
}

func report(findings ...doctor.Finding) *doctor.Report {
	return &doctor.Report{PFs: 8, VFs: 64, Findings: findings}
}

// TestDeviceTaintRuleCreatedAndDeleted: a VF's error creates exactly one
// rule naming that device, the same report again writes nothing, a healthy
// report deletes the rule, and rules the agent did not make (no labels,
// another manager, another node's agent) are never deleted.
func TestDeviceTaintRuleCreatedAndDeleted(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf := n.PFs[0]
	vf := pf.VFs[2]
	foreign := []*resourcev1.DeviceTaintRule{
		foreignRule("admin-hold", nil, vf.PCI),
		foreignRule("other-tool", map[string]string{labelManagedBy: "other-tool", labelNode: testNode}, vf.PCI),
		foreignRule("sriov-stable-other-node", map[string]string{labelManagedBy: Component, labelNode: "sriov-node-b"}, vf.PCI),
	}
	objs := []runtime.Object{testNodeObject(), pciSlice("node-a-vfs", append(vfPCIs(pf.VFs), vfPCIs(n.PFs[1].VFs[:2])...)...)}
	for _, r := range foreign {
		objs = append(objs, r)
	}
	h := newHarness(t, Config{}, nil, objs...)

	unhealthy := report(doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: vf.PCI,
		Message: "node GUID 0000:0000:0000:0000 of " + vf.PCI + " is zero"})
	h.round(unhealthy)
	h.waitFor("the VF's rule", func() bool { return len(h.ownRules()) == 1 })
	h.round(report(unhealthy.Findings...)) // the same findings, as the next doctor run gives them
	h.round(report())
	h.waitFor("the rule's removal", func() bool { return len(h.ownRules()) == 0 })
	// Two events of the first round, then two of the third. Within a round
	// the node's and the devices' work items may run in either order (a
	// work item whose watch has not listed yet is retried), so each round's
	// pair is compared by reason.
	wantEvents := []eventSummary{
		nodeEvent(corev1.EventTypeWarning, ReasonNodeUnhealthy),
		nodeEvent(corev1.EventTypeWarning, ReasonDeviceTainted),
		nodeEvent(corev1.EventTypeNormal, ReasonNodeHealthy),
		nodeEvent(corev1.EventTypeNormal, ReasonDeviceUntainted),
	}
	// Before stop: stopping the broadcaster drops what it has not written.
	gotEvents := h.nodeEvents(len(wantEvents))
	for i := 0; i+2 <= len(gotEvents); i += 2 {
		slices.SortFunc(gotEvents[i:i+2], func(a, b eventSummary) int { return strings.Compare(a.Reason, b.Reason) })
	}
	h.stop()

	// Watched, not polled: one LIST each when the reporter starts, no GET.
	for _, resource := range []string{"nodes", "resourceslices", "devicetaintrules"} {
		if got := h.count("list", resource, ""); got != 1 {
			t.Errorf("%d lists of %s for 3 reports, want 1 (then watched)", got, resource)
		}
		if got := h.count("watch", resource, ""); got != 1 {
			t.Errorf("%d watches of %s, want 1", got, resource)
		}
		if got := h.count("get", resource, ""); got != 0 {
			t.Errorf("%d gets of %s, want none (the watch has them)", got, resource)
		}
	}
	created := ""
	for _, a := range h.cs.Actions() {
		if a, ok := a.(k8stesting.CreateAction); ok && a.GetVerb() == "create" && a.GetResource() == gvrRules {
			rule := a.GetObject().(*resourcev1.DeviceTaintRule)
			created = rule.Name
			want := resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: str(testDriver), Pool: str(testNode), Device: str(deviceName(vf.PCI))},
				Taint:          resourcev1.DeviceTaint{Key: finding.TaintGUID, Value: "invalid", Effect: resourcev1.DeviceTaintEffectNoSchedule},
			}
			if diff := cmp.Diff(want, rule.Spec); diff != "" {
				t.Errorf("rule %s spec (-want +got):\n%s", rule.Name, diff)
			}
			wantMeta := metav1.ObjectMeta{Name: rule.Name,
				Labels:          map[string]string{labelManagedBy: Component, labelNode: testNode},
				Annotations:     map[string]string{annotationPCI: vf.PCI, annotationReason: unhealthy.Findings[0].Message},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: testNodeUID}}}
			if diff := cmp.Diff(wantMeta, rule.ObjectMeta); diff != "" {
				t.Errorf("rule %s metadata (-want +got):\n%s", rule.Name, diff)
			}
		}
	}
	// One create, no write for the repeated report, one delete of that rule
	// and nothing else: the foreign rules are untouched.
	if diff := cmp.Diff([]string{"create " + created, "delete " + created}, h.writes("devicetaintrules")); diff != "" {
		t.Errorf("DeviceTaintRule writes (-want +got):\n%s", diff)
	}
	left := h.rules()
	for _, r := range foreign {
		if got, ok := left[r.Name]; !ok || !cmp.Equal(r.Spec, got.Spec) {
			t.Errorf("foreign rule %s: left %v, spec %+v", r.Name, ok, got.Spec)
		}
	}
	if len(left) != len(foreign) {
		t.Errorf("%d rules left, want the %d foreign ones: %v", len(left), len(foreign), left)
	}
	if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
		t.Errorf("node events (-want +got):\n%s", diff)
	}
}

// TestDeviceTaintRulesCoverEveryVFOfPF: a PF's port finding taints each of
// its VFs (found through the fixture sysfs's virtfnN links) that the slice
// publishes, and no VF of another PF.
func TestDeviceTaintRulesCoverEveryVFOfPF(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf, other := n.PFs[0], n.PFs[1]
	h := newHarness(t, Config{}, nil,
		testNodeObject(), pciSlice("node-a-vfs", append(vfPCIs(pf.VFs), vfPCIs(other.VFs[:2])...)...))

	msg := "port 1 of " + pf.RDMA + " is DOWN"
	h.round(report(covering(doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckPortState, Subject: pf.PCI, Message: msg}, pf.VFs)))
	h.stop()

	var got []string
	for _, r := range h.ownRules() {
		if r.Spec.Taint.Key != finding.TaintPortState || r.Spec.Taint.Value != "not-active" || r.Annotations[annotationReason] != "PF "+pf.PCI+": "+msg {
			t.Errorf("rule %s: taint %+v, annotations %v", r.Name, r.Spec.Taint, r.Annotations)
		}
		if *r.Spec.DeviceSelector.Device != deviceName(r.Annotations[annotationPCI]) {
			t.Errorf("rule %s selects device %s for VF %s", r.Name, *r.Spec.DeviceSelector.Device, r.Annotations[annotationPCI])
		}
		got = append(got, r.Annotations[annotationPCI])
	}
	if diff := cmp.Diff(vfPCIs(pf.VFs), slices.Sorted(slices.Values(got))); diff != "" {
		t.Errorf("tainted VFs (-want +got):\n%s", diff)
	}
	if c := h.count("create", "devicetaintrules", ""); c != len(pf.VFs) {
		t.Errorf("%d creates, want %d", c, len(pf.VFs))
	}
}

// TestNodeConditionWrittenOnChange: the first report patches the
// condition, the same report again does not, a new message patches once
// (keeping the transition time), a new status patches once; the kubelet's
// conditions stay, and only status changes are node events.
func TestNodeConditionWrittenOnChange(t *testing.T) {
	h := newHarness(t, Config{}, nil, testNodeObject())
	patches := func() int { return h.count("patch", "nodes", "status") }
	guid := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:18:00.2", Message: "zero GUID"}
	port := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckPortState, Subject: "0000:40:00.0", Message: "DOWN"}

	h.round(report(guid))
	first := h.condition()
	if first == nil || first.Status != corev1.ConditionFalse || first.Reason != "GUIDInvalid" || patches() != 1 {
		t.Fatalf("after the first report: condition %+v, %d patches, want False GUIDInvalid and 1 patch", first, patches())
	}
	h.round(report(guid))
	if p := patches(); p != 1 {
		t.Errorf("the same report again: %d patches in all, want 1", p)
	}
	h.round(report(guid, port))
	second := h.condition()
	if p := patches(); p != 2 || second.Status != corev1.ConditionFalse || !strings.HasPrefix(second.Message, "2 errors") {
		t.Errorf("a new message: %d patches in all (want 2), condition %+v", p, second)
	}
	if !second.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("transition time moved from %v to %v without a status change", first.LastTransitionTime, second.LastTransitionTime)
	}
	h.round(report(guid, port))
	h.round(report())
	if c, p := h.condition(), patches(); p != 3 || c.Status != corev1.ConditionTrue || c.Reason != ReasonHealthy {
		t.Errorf("healthy again: %d patches in all (want 3), condition %+v", p, c)
	}
	wantEvents := []eventSummary{nodeEvent(corev1.EventTypeWarning, ReasonNodeUnhealthy), nodeEvent(corev1.EventTypeNormal, ReasonNodeHealthy)}
	gotEvents := h.nodeEvents(len(wantEvents)) // before stop, which drops what the broadcaster has not written
	h.stop()

	// Strategic merge by type: the kubelet's condition stays as it was.
	conds := h.node().Status.Conditions
	i := slices.IndexFunc(conds, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
	if len(conds) != 2 || i < 0 || !cmp.Equal(testNodeObject().Status.Conditions[0], conds[i]) {
		t.Errorf("node conditions %+v, want the kubelet's Ready as it was and ours", conds)
	}
	if w := h.writes("nodes"); len(w) != 3 {
		t.Errorf("node writes %v, want the 3 status patches only (no taint without TaintOnError)", w)
	}
	if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
		t.Errorf("node events (-want +got):\n%s", diff)
	}
}

// TestNodeTaintOnError: with TaintOnError the taint comes with the first
// error, stays without a write while the report is the same, follows the
// worst check, and goes when only warnings are left; the node's other taints
// are never touched.
func TestNodeTaintOnError(t *testing.T) {
	others := []corev1.Taint{
		{Key: "example.com/maintenance", Value: "rack-7", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/draining", Effect: corev1.TaintEffectNoExecute},
	}
	h := newHarness(t, Config{TaintOnError: true}, nil, testNodeObject(others...))
	patches := func() int { return h.count("patch", "nodes", "") }
	ours := func(check string) []corev1.Taint {
		return append(append([]corev1.Taint(nil), others...), corev1.Taint{Key: TaintKey, Value: check, Effect: corev1.TaintEffectNoSchedule})
	}
	checkTaints := func(when string, want []corev1.Taint, wantPatches int) {
		t.Helper()
		if diff := cmp.Diff(want, h.node().Spec.Taints); diff != "" {
			t.Errorf("%s: taints (-want +got):\n%s", when, diff)
		}
		if p := patches(); p != wantPatches {
			t.Errorf("%s: %d taint patches in all, want %d", when, p, wantPatches)
		}
	}
	guid := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: "0000:18:00.2"}
	port := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckPortState, Subject: "0000:40:00.0"}
	fw := doctor.Finding{Severity: doctor.SeverityWarning, Check: finding.CheckFirmwareVersion, Subject: "0000:18:00.0"}

	h.round(report(guid))
	checkTaints("first error", ours(finding.CheckGUIDInvalid), 1)
	h.round(report(guid))
	checkTaints("the same error again", ours(finding.CheckGUIDInvalid), 1)
	h.round(report(port, guid))
	checkTaints("another worst check", ours(finding.CheckPortState), 2)
	h.round(report(fw))
	checkTaints("warnings only", others, 3)
	h.round(report(fw))
	checkTaints("warnings only again", others, 3)
}

// TestPodEventsForEachTransition: a drift is a Warning VFDrift, a cleared
// reason a Normal VFDriftRecovered, a repair a Normal VFRepaired, each on
// the pod (namespace, name, UID) the record names; a record without its
// pod gets none.
func TestPodEventsForEachTransition(t *testing.T) {
	h := newHarness(t, Config{}, nil, testNodeObject())
	rec := &state.Record{Network: "ib-vf", ContainerID: "c1", IfName: "net1", PCI: "0000:18:00.2",
		PodNamespace: "e2e", PodName: "vf-0", PodUID: "5f0c1d2e"}
	anonymous := &state.Record{Network: "ib-vf", ContainerID: "c0", IfName: "net1", PCI: "0000:18:00.3"}

	h.r.Drift(anonymous, []drift.Finding{{Reason: drift.Renamed, Detail: "named drift0"}}, nil)
	h.r.Repaired(anonymous, "rename", "renamed drift0 back to net1")
	h.r.Drift(rec, []drift.Finding{{Reason: drift.Renamed, Detail: "VF 0000:18:00.2 is named drift0, expected net1"}}, nil)
	h.r.Repaired(rec, "rename", "renamed drift0 back to net1")
	h.r.Drift(rec, []drift.Finding{{Reason: drift.PortDown, Detail: "port 1 of mlx5_10 is 1: DOWN"}}, []drift.Reason{drift.Renamed})
	const want = 4
	h.waitFor("the pod's events", func() bool { return len(h.events("Pod", "e2e", "vf-0")) >= want })

	pod := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "e2e", Name: "vf-0", UID: "5f0c1d2e"}
	evs := h.events("Pod", "e2e", "vf-0")
	sortEvents(evs)
	wantEvents := []eventSummary{
		{corev1.EventTypeWarning, ReasonDrift, pod},
		{corev1.EventTypeNormal, ReasonRepaired, pod},
		{corev1.EventTypeWarning, ReasonDrift, pod},
		{corev1.EventTypeNormal, ReasonRecovered, pod},
	}
	if diff := cmp.Diff(wantEvents, summarize(evs)); diff != "" {
		t.Errorf("pod events (-want +got):\n%s", diff)
	}
	wantMessages := []string{
		"VF 0000:18:00.2 (net1, network ib-vf) drifted: renamed: VF 0000:18:00.2 is named drift0, expected net1",
		"VF 0000:18:00.2 (net1, network ib-vf) repaired (rename): renamed drift0 back to net1",
		"VF 0000:18:00.2 (net1, network ib-vf) drifted: port-down: port 1 of mlx5_10 is 1: DOWN",
		"VF 0000:18:00.2 (net1, network ib-vf) recovered from: renamed",
	}
	for i, e := range evs {
		if i < len(wantMessages) && e.Message != wantMessages[i] {
			t.Errorf("event %d message %q, want %q", i, e.Message, wantMessages[i])
		}
		if e.Source.Component != Component || e.Source.Host != testNode || e.Count != 1 {
			t.Errorf("event %d source %+v, count %d", i, e.Source, e.Count)
		}
	}
	// The anonymous record's calls came first and events are written in
	// order: had they made any, it would be there by now.
	o, err := h.cs.Tracker().List(gvrEvents, corev1.SchemeGroupVersion.WithKind("Event"), "")
	if err != nil {
		t.Fatal(err)
	}
	if all := o.(*corev1.EventList).Items; len(all) != want {
		t.Errorf("%d events in all, want the pod's %d: %v", len(all), want, summarize(all))
	}
}

// TestPodEventsRateLimited: a port flapping on one pod far beyond the
// burst gives two events (VFDrift, VFDriftRecovered) whose counts grow up
// to the burst, and drifts that differ each time give at most a burst of
// events per type, never one write per call (eventBurst, eventQPS).
func TestPodEventsRateLimited(t *testing.T) {
	h := newHarness(t, Config{}, nil, testNodeObject())
	pod := func(ns string) *state.Record {
		return &state.Record{Network: "ib-vf", ContainerID: ns, IfName: "net1", PCI: "0000:18:00.2",
			PodNamespace: ns, PodName: "vf-0", PodUID: ns + "-uid"}
	}
	flapping, changing, sentinel := pod("flapping"), pod("changing"), pod("sentinel")
	const calls = 3 * eventBurst
	start := time.Now()
	for i := range calls {
		h.r.Drift(flapping, []drift.Finding{{Reason: drift.PortDown, Detail: "port 1 of mlx5_10 is 1: DOWN"}}, nil)
		h.r.Drift(flapping, nil, []drift.Reason{drift.PortDown})
		h.r.Drift(changing, []drift.Finding{{Reason: drift.GUID, Detail: fmt.Sprintf("port GUID is a288:c2ff:fe18:%04x", i)}}, nil)
	}
	// Events are handled in order: once the sentinel's is written, every
	// earlier one was written, counted or dropped.
	h.r.Repaired(sentinel, "rename", "sentinel")
	h.waitFor("the sentinel event", func() bool { return len(h.events("Pod", "sentinel", "vf-0")) == 1 })
	// What the token bucket may have refilled meanwhile (nothing in a run
	// shorter than 1/eventQPS).
	burst := eventBurst + int(time.Since(start).Seconds()*eventQPS)

	writes := func(ns string) int {
		n := 0
		for _, a := range h.cs.Actions() {
			if a.GetResource() == gvrEvents && a.GetNamespace() == ns && (a.GetVerb() == "create" || a.GetVerb() == "patch") {
				n++
			}
		}
		return n
	}
	flaps := h.events("Pod", "flapping", "vf-0")
	sortEvents(flaps)
	if got := summarize(flaps); len(got) != 2 || got[0].Reason != ReasonDrift || got[0].Type != corev1.EventTypeWarning ||
		got[1].Reason != ReasonRecovered || got[1].Type != corev1.EventTypeNormal {
		t.Fatalf("flapping port: events %v, want one VFDrift Warning and one VFDriftRecovered Normal", got)
	}
	for _, e := range flaps {
		if e.Count < 2 || int(e.Count) > burst {
			t.Errorf("flapping port: %s counted %d times, want 2 to %d (counted, within the burst)", e.Reason, e.Count, burst)
		}
	}
	if w := writes("flapping"); w > 2*burst {
		t.Errorf("flapping port: %d event writes for %d calls, want at most %d (a burst per event type)", w, 2*calls, 2*burst)
	}
	if n, w := len(h.events("Pod", "changing", "vf-0")), writes("changing"); n > burst || w > burst {
		t.Errorf("changing drift: %d events, %d writes for %d calls, want at most %d", n, w, calls, burst)
	}
}

// TestDeviceTaintRuleVersionDiscovered: the reporter writes its rules at
// the newest DeviceTaintRule version the API server's discovery lists
// (v1 on 1.37, v1beta2 on 1.36, v1alpha3 on 1.33 to 1.35) and nowhere else;
// serving none (or no ResourceSlices at v1) leaves the node condition
// alone, said once in the log, with no list, watch or retry of them.
func TestDeviceTaintRuleVersionDiscovered(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	vf := n.PFs[0].VFs[0]
	bad := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: vf.PCI, Message: "zero GUID"}
	worse := doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckPortState, Subject: "0000:40:00.0", Message: "DOWN"}
	for _, tc := range []struct {
		name          string
		slices, rules string
		wantRules     string // the version written, "" for none
		wantLog       string // the one line saying what is not served
	}{
		{"1.37 v1", "v1", "v1", "v1", ""},
		{"1.36 v1beta2", "v1", "v1beta2", "v1beta2", ""},
		{"1.35 v1alpha3", "v1", "v1alpha3", "v1alpha3", ""},
		{"no DeviceTaintRule", "v1", "", "", "the API server does not serve devicetaintrules"},
		{"no ResourceSlice at v1", "v1beta1", "v1alpha3", "", "the API server does not serve resourceslices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{}, func(cs *fake.Clientset) {
				cs.Resources = servedDRA(tc.slices, tc.rules)
			}, testNodeObject(), pciSlice("node-a-vfs", vf.PCI))
			h.round(report(bad))
			h.round(report(bad))
			h.round(report(bad, worse))
			if tc.wantRules != "" {
				h.waitFor("the VF's rule", func() bool { return len(h.ruleNames(tc.wantRules)) == 1 })
			}
			h.round(report())
			if tc.wantRules != "" {
				h.waitFor("the rule's removal", func() bool { return len(h.ruleNames(tc.wantRules)) == 0 })
			}
			h.stop()

			if c := h.condition(); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("condition %+v, want True after the healthy report", c)
			}
			if p := h.count("patch", "nodes", "status"); p != 3 {
				t.Errorf("%d condition patches, want 3 (one per change)", p)
			}
			var ruleActions []string
			for _, a := range h.cs.Actions() {
				if a.GetResource().Resource == "devicetaintrules" {
					ruleActions = append(ruleActions, a.GetVerb()+" "+a.GetResource().Version)
				}
			}
			want := []string(nil)
			if v := tc.wantRules; v != "" {
				want = []string{"list " + v, "watch " + v, "create " + v, "delete " + v}
			}
			if diff := cmp.Diff(want, ruleActions); diff != "" {
				t.Errorf("DeviceTaintRule requests (-want +got):\n%s", diff)
			}
			if got := h.count("get", "resource", ""); got != len(ruleVersions) {
				t.Errorf("%d discovery requests, want %d (each version once, at the first report)", got, len(ruleVersions))
			}
			if tc.wantLog != "" {
				if got := h.logs.count(t, slog.LevelInfo, tc.wantLog); got != 1 {
					t.Errorf("%d log lines %q, want 1:\n%s", got, tc.wantLog, h.logs)
				}
				if got := h.count("list", "resourceslices", ""); got != 0 {
					t.Errorf("%d lists of ResourceSlices without device taints, want none", got)
				}
			}
			if got := h.logs.count(t, slog.LevelWarn, "cannot update"); got != 0 {
				t.Errorf("%d failed updates, want none:\n%s", got, h.logs)
			}
		})
	}
}

// ruleNames are the names of the rules the fake holds at version v.
func (h *harness) ruleNames(v string) []string {
	h.t.Helper()
	gvr := schema.GroupVersionResource{Group: resourcev1.GroupName, Version: v, Resource: "devicetaintrules"}
	o, err := h.cs.Tracker().List(gvr, gvr.GroupVersion().WithKind("DeviceTaintRule"), "")
	if err != nil {
		h.t.Fatalf("list DeviceTaintRules %s: %v", v, err)
	}
	items, err := meta.ExtractList(o)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.(metav1.Object).GetName())
	}
	return out
}

// TestWatchPutsRulesRight: with no new doctor report, a rule someone
// deleted comes back, and a VF published after the report (a DRA driver
// that started later) gets its rule, from the watch alone.
func TestWatchPutsRulesRight(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	a, b := n.PFs[0].VFs[0], n.PFs[0].VFs[1]
	h := newHarness(t, Config{}, nil, testNodeObject(), pciSlice("node-a-vfs", a.PCI))
	h.round(report(
		doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: a.PCI, Message: "zero GUID"},
		doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: b.PCI, Message: "zero GUID"}))
	h.waitFor("the published VF's rule", func() bool { return len(h.ownRules()) == 1 })
	var name string
	for name = range h.ownRules() {
	}
	ctx := context.Background()
	if err := h.cs.ResourceV1().DeviceTaintRules().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the deleted rule back", func() bool { _, ok := h.ownRules()[name]; return ok })
	if _, err := h.cs.ResourceV1().ResourceSlices().Create(ctx, pciSlice("node-a-later", b.PCI), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the later VF's rule", func() bool { return len(h.ownRules()) == 2 })
	for _, r := range h.ownRules() {
		if pci := r.Annotations[annotationPCI]; pci != a.PCI && pci != b.PCI {
			t.Errorf("rule %s for %s", r.Name, pci)
		}
	}
}

// TestSteadyStateNoRequests: once the API server holds what the report
// says, the same report again (every doctor run, every port poll) and the
// kubelet's own node updates cost no request at all.
func TestSteadyStateNoRequests(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	vf := n.PFs[0].VFs[0]
	h := newHarness(t, Config{TaintOnError: true}, nil, testNodeObject(), pciSlice("node-a-vfs", vf.PCI))
	rep := report(doctor.Finding{Severity: doctor.SeverityError, Check: finding.CheckGUIDInvalid, Subject: vf.PCI, Message: "zero GUID"})
	h.round(rep)
	h.waitFor("the VF's rule", func() bool { return len(h.ownRules()) == 1 })
	h.nodeEvents(2) // unhealthy, tainted: written before the count starts
	before := len(h.cs.Actions())
	ctx := context.Background()
	for i := range 20 {
		// The kubelet's heartbeat: a node update the reporter's watch sees.
		node := h.node().DeepCopy()
		node.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Duration(i) * time.Second))
		if _, err := h.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.round(report(rep.Findings...))
	}
	h.stop()
	var extra []string
	for _, a := range h.cs.Actions()[before:] {
		if a.GetVerb() != "update" || a.GetSubresource() != "status" || a.GetResource().Resource != "nodes" {
			extra = append(extra, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	if len(extra) > 0 {
		t.Errorf("%d requests for 20 unchanged reports, want none: %v", len(extra), extra)
	}
}

// TestFabricSecondHolderTainted: the fabric verdict taints the VF that came
// second to a GUID (one rule, key fabric-guid, the kind as its value), not
// the first holder, nor a VF whose only finding is informational or
// invalid (the doctor's own guid check taints those); the same verdict
// again writes nothing, and the verdict cleared deletes the rule.
func TestFabricSecondHolderTainted(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	pf := n.PFs[0]
	second, first, info := pf.VFs[1], pf.VFs[2], pf.VFs[3]
	h := newHarness(t, Config{}, nil, testNodeObject(), pciSlice("node-a-vfs", vfPCIs(pf.VFs)...))
	h.round(report())

	msg := "node GUID ba3f:d200:0001:0001 is also held by node gpu-07 VF 0000:18:00.2, which published it first"
	verdict := map[string][]state.FabricFinding{
		second.PCI: {{Kind: string(v1alpha1.DuplicateNodeGUID), GUID: "ba3f:d200:0001:0001", Second: true, Message: msg},
			{Kind: string(v1alpha1.DuplicatePortGUID), GUID: "ba3f:d280:0001:0001", Second: true, Message: "port GUID too"}},
		first.PCI: {{Kind: string(v1alpha1.DuplicateNodeGUID), GUID: "ba3f:d200:0001:0002", Message: "kept"}},
		info.PCI:  {{Kind: string(v1alpha1.LinkLayerMismatch), GUID: "Ethernet", Second: true, Message: "rail"}, {Kind: string(v1alpha1.InvalidGUID), Second: true, Message: "zero"}},
	}
	sync := func(vfs map[string][]state.FabricFinding) {
		t.Helper()
		h.r.Fabric(vfs)
		_, gen := h.r.latest()
		h.waitFor("the sync of the fabric verdict", func() bool { return h.r.syncedReports(keyDevices) >= gen })
	}
	sync(verdict)
	h.waitFor("the second holder's rule", func() bool { return len(h.ownRules()) == 1 })
	var rule resourcev1.DeviceTaintRule
	for _, r := range h.ownRules() {
		rule = r
	}
	wantTaint := resourcev1.DeviceTaint{Key: finding.TaintFabricGUID, Value: "duplicate-node-guid", Effect: resourcev1.DeviceTaintEffectNoSchedule}
	if diff := cmp.Diff(wantTaint, rule.Spec.Taint); diff != "" {
		t.Errorf("taint (-want +got):\n%s", diff)
	}
	if got := rule.Annotations[annotationPCI]; got != second.PCI {
		t.Errorf("rule for VF %s, want the second holder %s", got, second.PCI)
	}
	if got, want := rule.Annotations[annotationReason], "fabric ledger: "+msg; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	sync(verdict)     // the same verdict mirrored again: no write
	h.round(report()) // a doctor round keeps it
	sync(map[string][]state.FabricFinding{})
	h.waitFor("the rule's removal", func() bool { return len(h.ownRules()) == 0 })
	h.stop()
	if diff := cmp.Diff([]string{"create " + rule.Name, "delete " + rule.Name}, h.writes("devicetaintrules")); diff != "" {
		t.Errorf("DeviceTaintRule writes (-want +got):\n%s", diff)
	}
}
