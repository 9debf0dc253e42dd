package kubereport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

// pciBusIDAttribute is the standard device attribute (KEP-5316, also
// k8s.io/dynamic-resource-allocation/deviceattribute) holding a device's PCI
// address in extended BDF notation, 0000:18:00.2.
const pciBusIDAttribute resourcev1.QualifiedName = "resource.kubernetes.io/pciBusID"

// pciAddressAttribute is the driver-domain attribute dra-driver-sriov
// publishes (sriovnetwork.k8snetworkplumbingwg.io/pciAddress); any driver's
// <driver>/pciAddress is read the same way.
const pciAddressAttribute = "pciAddress"

// Labels and annotations on the DeviceTaintRules the agent owns.
const (
	labelManagedBy   = "app.kubernetes.io/managed-by"
	labelNode        = Domain + "/node"
	annotationPCI    = Domain + "/pci"
	annotationReason = Domain + "/finding"
)

// ReasonDeviceTainted and ReasonDeviceUntainted are the reasons of the
// events on the node when a VF's device taint rule is created or removed.
const (
	ReasonDeviceTainted   = "VFDeviceTainted"
	ReasonDeviceUntainted = "VFDeviceUntainted"
)

// problem is one reason a VF must not be allocated.
type problem struct {
	value   string // the taint's value
	message string // the doctor's message
}

// vfProblems maps each PCI address to its problems by device taint key: the
// errors of the checks that make a VF unusable (their registry entry names
// a device taint, finding.Check.DeviceTaint), a VF's own, and its PF's port
// findings (the VFs a finding covers).
func vfProblems(rep *doctor.Report) map[string]map[string]problem {
	out := map[string]map[string]problem{}
	add := func(pci, key string, p problem) {
		if out[pci] == nil {
			out[pci] = map[string]problem{}
		}
		if _, ok := out[pci][key]; !ok { // the first (the doctor's order) stays
			out[pci][key] = p
		}
	}
	for _, f := range rep.Findings {
		c, _ := finding.Lookup(f.Check)
		t := c.DeviceTaint
		if t == nil || f.Severity != doctor.SeverityError {
			continue
		}
		add(f.Subject, t.Key, problem{value: t.Value, message: f.Message})
		if t.CoversVFs {
			for _, vf := range f.Covers {
				add(vf, t.Key, problem{value: t.Value, message: "PF " + f.Subject + ": " + f.Message})
			}
		}
	}
	return out
}

// device is one device of a ResourceSlice that names a PCI function.
type device struct {
	driver, pool, name, pci string
}

// pciDevices lists the devices of the slices whose attributes give a PCI
// address: the standard resource.kubernetes.io/pciBusID, or the driver's own
// pciAddress (qualified with the driver's name or not).
func pciDevices(slices []resourcev1.ResourceSlice) []device {
	var out []device
	for _, s := range slices {
		driver := s.Spec.Driver
		for _, d := range s.Spec.Devices {
			for _, name := range []resourcev1.QualifiedName{pciBusIDAttribute,
				resourcev1.QualifiedName(driver + "/" + pciAddressAttribute), pciAddressAttribute} {
				a, ok := d.Attributes[name]
				if ok && a.StringValue != nil {
					out = append(out, device{driver: driver, pool: s.Spec.Pool.Name, name: d.Name, pci: normalPCI(*a.StringValue)})
					break
				}
			}
		}
	}
	return out
}

// normalPCI writes a PCI address as sysfs names it: lower case, with the
// domain (0000:) when the attribute left it out.
func normalPCI(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if strings.Count(s, ":") == 1 {
		s = "0000:" + s
	}
	return s
}

// desiredRules is the DeviceTaintRule each problem of each device needs,
// by name.
func desiredRules(node, nodeUID string, effect resourcev1.DeviceTaintEffect, devs []device, problems map[string]map[string]problem) map[string]*resourcev1.DeviceTaintRule {
	out := map[string]*resourcev1.DeviceTaintRule{}
	for _, d := range devs {
		for key, p := range problems[d.pci] {
			rule := &resourcev1.DeviceTaintRule{
				ObjectMeta: metav1.ObjectMeta{
					Name:        ruleName(node, d, key),
					Labels:      map[string]string{labelManagedBy: Component, labelNode: labelValue(node)},
					Annotations: map[string]string{annotationPCI: d.pci, annotationReason: p.message},
				},
				Spec: resourcev1.DeviceTaintRuleSpec{
					DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &d.driver, Pool: &d.pool, Device: &d.name},
					Taint:          resourcev1.DeviceTaint{Key: key, Value: p.value, Effect: effect},
				},
			}
			if nodeUID != "" {
				// Deleted with the node by the garbage collector.
				rule.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(nodeUID)}}
			}
			out[rule.Name] = rule
		}
	}
	return out
}

// ruleName names a device's rule for one key: readable, unique per driver,
// pool, device and key (a short hash of them ends it), a DNS subdomain.
func ruleName(node string, d device, key string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{node, d.driver, d.pool, d.name, key}, "\x00")))
	hash := hex.EncodeToString(sum[:4])
	name := strings.ToLower(strings.Join([]string{"sriov-stable", node, d.name, strings.TrimPrefix(key, Domain+"/"), hash}, "-"))
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "sriov-stable-" + hex.EncodeToString(sum[:16])
	}
	return name
}

// labelValue is a node name as a label value: itself when it is one (node
// names may be longer than 63 characters), a hash otherwise.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// syncDevices keeps one DeviceTaintRule per problem of each VF this node's
// ResourceSlices publish, and none for healthy VFs. Without DRA (no
// ResourceSlice of the node, or the API not served) there is nothing to do.
func (r *Reporter) syncDevices(ctx context.Context, rep *doctor.Report) error {
	if r.dra == nil {
		if err := r.startDRA(ctx); err != nil {
			return err
		}
	}
	if r.ruleAt == nil {
		return nil // not served: the node condition alone
	}
	if !r.nodes.HasSynced() || !r.slices.HasSynced() || !r.rules.HasSynced() {
		return errCacheSyncing
	}
	var published []resourcev1.ResourceSlice
	for _, obj := range r.slices.GetStore().List() {
		if s := obj.(*resourcev1.ResourceSlice); s.Spec.NodeName != nil && *s.Spec.NodeName == r.cfg.NodeName {
			published = append(published, *s)
		}
	}
	own := labels.SelectorFromSet(labels.Set{labelManagedBy: Component, labelNode: labelValue(r.cfg.NodeName)})
	var existing []*resourcev1.DeviceTaintRule
	for _, obj := range r.rules.GetStore().List() {
		cur, err := r.ruleAt.asV1(obj)
		if err != nil {
			return err
		}
		if own.Matches(labels.Set(cur.Labels)) {
			existing = append(existing, cur)
		}
	}
	uid := ""
	if len(published) > 0 {
		uid = r.nodeUID()
	}
	problems := vfProblems(rep)
	r.mu.Lock()
	for pci, p := range r.fabric {
		if problems[pci] == nil {
			problems[pci] = map[string]problem{}
		}
		problems[pci][finding.TaintFabricGUID] = p
	}
	r.mu.Unlock()
	want := desiredRules(r.cfg.NodeName, uid, r.cfg.DeviceTaintEffect, pciDevices(published), problems)
	var errs []error
	have := map[string]bool{}
	for _, cur := range existing {
		have[cur.Name] = true
		w, keep := want[cur.Name]
		switch {
		case !keep:
			errs = append(errs, r.deleteRule(ctx, cur))
		case !sameRule(cur, w):
			errs = append(errs, r.updateRule(ctx, cur, w))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !have[name] {
			errs = append(errs, r.createRule(ctx, want[name]))
		}
	}
	return errors.Join(errs...)
}

// startDRA discovers which of ResourceSlices and DeviceTaintRules the API
// server serves and, when it serves both, starts watching the node's
// slices and the agent's rules. Without them it says so once: the node
// condition alone tells the cluster.
func (r *Reporter) startDRA(ctx context.Context) error {
	api, err := discoverDRA(ctx, r.cfg.Client)
	if err != nil {
		return err
	}
	r.dra = &api
	switch {
	case !api.slices:
		r.log.Info("the API server does not serve resourceslices (resource.k8s.io/v1, Kubernetes 1.34 and later): no per-VF device taints",
			"node", r.cfg.NodeName)
		return nil
	case api.rules == "":
		r.log.Info("the API server does not serve devicetaintrules (resource.k8s.io "+strings.Join(ruleVersions, ", ")+
			"): no per-VF device taints, the node condition alone", "node", r.cfg.NodeName)
		return nil
	}
	r.ruleAt = rulesAt(r.cfg.Client, api.rules)
	own := labels.SelectorFromSet(labels.Set{labelManagedBy: Component, labelNode: labelValue(r.cfg.NodeName)}).String()
	r.slices = r.watch(ctx, sliceListWatch(r.cfg.Client, r.cfg.NodeName), &resourcev1.ResourceSlice{}, keyDevices)
	r.rules = r.watch(ctx, r.ruleAt.listWatch(own), r.ruleAt.example(), keyDevices)
	r.log.Info("watching the node's ResourceSlices and its DeviceTaintRules", "node", r.cfg.NodeName,
		"deviceTaintRules", resourcev1.GroupName+"/"+api.rules)
	return nil
}

// cachedRule is the rule of that name as the watch last saw it, nil when it
// saw none.
func (r *Reporter) cachedRule(name string) *resourcev1.DeviceTaintRule {
	obj, ok, err := r.rules.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	rule, err := r.ruleAt.asV1(obj)
	if err != nil {
		return nil
	}
	return rule
}

// sameRule reports whether an existing rule already says what want says:
// the same device, taint and annotations.
func sameRule(have, want *resourcev1.DeviceTaintRule) bool {
	h, w := have.Spec.DeviceSelector, want.Spec.DeviceSelector
	return h != nil && ptrEq(h.Driver, w.Driver) && ptrEq(h.Pool, w.Pool) && ptrEq(h.Device, w.Device) &&
		have.Spec.Taint.Key == want.Spec.Taint.Key && have.Spec.Taint.Value == want.Spec.Taint.Value &&
		have.Spec.Taint.Effect == want.Spec.Taint.Effect && maps.Equal(have.Annotations, want.Annotations)
}

func ptrEq(a, b *string) bool { return a != nil && b != nil && *a == *b }

// createRule creates a device's rule and tells the node's events.
//
// Equivalent to: kubectl create -f devicetaintrule.yaml
func (r *Reporter) createRule(ctx context.Context, rule *resourcev1.DeviceTaintRule) error {
	_, err := r.ruleAt.create(ctx, rule)
	if apierrors.IsAlreadyExists(err) {
		return nil // created by an earlier attempt whose answer was lost; the watch brings it to compare
	}
	if err != nil {
		return fmt.Errorf("create DeviceTaintRule %s: %w", rule.Name, err)
	}
	seeWrite(ctx, func() bool { return r.cachedRule(rule.Name) != nil })
	t := rule.Spec.Taint
	taint := t.Key + "=" + t.Value + ":" + string(t.Effect)
	msg := fmt.Sprintf("VF %s (device %s of driver %s, pool %s) tainted %s by DeviceTaintRule %s: %s",
		rule.Annotations[annotationPCI], *rule.Spec.DeviceSelector.Device, *rule.Spec.DeviceSelector.Driver,
		*rule.Spec.DeviceSelector.Pool, taint, rule.Name, rule.Annotations[annotationReason])
	r.recorder.Event(r.nodeRef(), corev1.EventTypeWarning, ReasonDeviceTainted, clip(msg))
	r.log.Warn("VF tainted for the scheduler", "node", r.cfg.NodeName, "pci", rule.Annotations[annotationPCI],
		"device", *rule.Spec.DeviceSelector.Device, "taint", taint, "deviceTaintRule", rule.Name)
	return nil
}

// updateRule rewrites a rule whose finding changed (the message, the
// effect), at the version the watch saw.
func (r *Reporter) updateRule(ctx context.Context, cur, want *resourcev1.DeviceTaintRule) error {
	want = want.DeepCopy()
	want.ResourceVersion = cur.ResourceVersion
	out, err := r.ruleAt.update(ctx, want)
	if err != nil {
		return fmt.Errorf("update DeviceTaintRule %s: %w", want.Name, err)
	}
	seeWrite(ctx, func() bool {
		c := r.cachedRule(want.Name)
		return c == nil || c.ResourceVersion == out.ResourceVersion || sameRule(c, want)
	})
	return nil
}

// deleteRule deletes a rule whose VF is healthy again (or no longer
// published) and tells the node's events.
func (r *Reporter) deleteRule(ctx context.Context, rule *resourcev1.DeviceTaintRule) error {
	err := r.ruleAt.delete(ctx, rule.Name, rule.UID)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete DeviceTaintRule %s: %w", rule.Name, err)
	}
	seeWrite(ctx, func() bool { c := r.cachedRule(rule.Name); return c == nil || c.UID != rule.UID })
	t := rule.Spec.Taint
	taint := t.Key + "=" + t.Value + ":" + string(t.Effect)
	device := ""
	if s := rule.Spec.DeviceSelector; s != nil && s.Device != nil {
		device = *s.Device
	}
	r.recorder.Event(r.nodeRef(), corev1.EventTypeNormal, ReasonDeviceUntainted,
		clip(fmt.Sprintf("VF %s (device %s): DeviceTaintRule %s removed, taint %s gone", rule.Annotations[annotationPCI], device, rule.Name, taint)))
	r.log.Info("VF untainted for the scheduler", "node", r.cfg.NodeName, "pci", rule.Annotations[annotationPCI],
		"device", device, "taint", taint, "deviceTaintRule", rule.Name)
	return nil
}
