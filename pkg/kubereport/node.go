package kubereport

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
)

// ConditionType is the node condition the agent owns: True while the doctor
// finds no error, False while it does. Never NetworkUnavailable, which
// belongs to the primary network's plugin.
const ConditionType corev1.NodeConditionType = "SRIOVVFsHealthy"

// TaintKey is the NoSchedule taint --taint-on-error keeps on the node while
// an error finding stands; its value is the worst finding's check.
const TaintKey = Domain + "/vf-unhealthy"

// ReasonHealthy is the condition's reason when the doctor finds nothing
// worse than information.
const ReasonHealthy = "VFsHealthy"

// Reasons of the events on the node.
const (
	ReasonNodeUnhealthy = "SRIOVVFsUnhealthy" // Warning: the condition turned False
	ReasonNodeHealthy   = "SRIOVVFsHealthy"   // Normal: it turned True again
)

// maxSubjects is how many subjects of one check a message names before it
// counts the rest.
const maxSubjects = 8

// nodeCondition is the condition a doctor report gives: status from
// whether any finding is an error, reason from the worst finding's check,
// message naming the worst findings' subjects by check. Transition and
// heartbeat times are the caller's.
func nodeCondition(rep *doctor.Report) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue, Reason: ReasonHealthy,
		Message: fmt.Sprintf("no errors or warnings on %d PFs and %d VFs", rep.PFs, rep.VFs)}
	errs, warns := subjects(rep, doctor.SeverityError), subjects(rep, doctor.SeverityWarning)
	switch {
	case errs > 0:
		c.Status = corev1.ConditionFalse
		c.Reason = reasonOf(worst(rep).Check)
		c.Message = count(errs, "error") + ": " + summary(rep, doctor.SeverityError)
		if warns > 0 {
			c.Message += "; and " + count(warns, "warning")
		}
	case warns > 0:
		c.Reason = reasonOf(worst(rep).Check)
		c.Message = "no errors; " + count(warns, "warning") + ": " + summary(rep, doctor.SeverityWarning)
	}
	if errs+warns > 0 {
		c.Message += " (sriov-stable-agent doctor on the node gives the remedies)"
	}
	return c
}

// subjects counts the findings of a severity, a check's finding about one
// subject once (a VF's node and port GUID are one zero-GUID error).
func subjects(rep *doctor.Report, sev doctor.Severity) int {
	seen := map[[2]string]bool{}
	for _, f := range rep.Findings {
		if f.Severity == sev {
			seen[[2]string{f.Check, f.Subject}] = true
		}
	}
	return len(seen)
}

// worst is the report's most severe finding (the doctor sorts them so).
func worst(rep *doctor.Report) doctor.Finding { return rep.Findings[0] }

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// summary names the subjects of the findings of one severity, grouped by
// check in the report's order: "guid-invalid 0000:c0:05.1, 0000:c0:05.2;
// port-state 0000:18:00.0", at most maxSubjects per check.
func summary(rep *doctor.Report, sev doctor.Severity) string {
	var checks []string
	subjects := map[string][]string{}
	for _, f := range rep.Findings {
		if f.Severity != sev {
			continue
		}
		if _, ok := subjects[f.Check]; !ok {
			checks = append(checks, f.Check)
		}
		if !slices.Contains(subjects[f.Check], f.Subject) {
			subjects[f.Check] = append(subjects[f.Check], f.Subject)
		}
	}
	parts := make([]string, len(checks))
	for i, check := range checks {
		s := subjects[check]
		more := ""
		if len(s) > maxSubjects {
			more = fmt.Sprintf(" and %d more", len(s)-maxSubjects)
			s = s[:maxSubjects]
		}
		parts[i] = check + " " + strings.Join(s, ", ") + more
	}
	return strings.Join(parts, "; ")
}

// acronyms are the words of check names a reason spells in capitals.
var acronyms = map[string]string{"guid": "GUID", "vf": "VF", "pf": "PF", "rdma": "RDMA", "sriov": "SRIOV", "numvfs": "NumVFs", "altname": "AltName"}

// reasonOf turns a doctor check name into a condition reason
// (UpperCamelCase): guid-invalid → GUIDInvalid, port-state → PortState.
func reasonOf(check string) string {
	var b strings.Builder
	for _, w := range strings.Split(check, "-") {
		if a, ok := acronyms[w]; ok {
			b.WriteString(a)
		} else if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// nodeTaint is the taint --taint-on-error wants for a report: nil unless an
// error finding stands.
func nodeTaint(rep *doctor.Report) *corev1.Taint {
	if rep.Count(doctor.SeverityError) == 0 {
		return nil
	}
	return &corev1.Taint{Key: TaintKey, Value: worst(rep).Check, Effect: corev1.TaintEffectNoSchedule}
}

// syncNode brings the node's condition (and with TaintOnError its taint)
// in line with the report, writing only what differs from what the watch
// shows the node has.
func (r *Reporter) syncNode(ctx context.Context, rep *doctor.Report) error {
	if !r.nodes.HasSynced() {
		return errCacheSyncing
	}
	node := r.cachedNode()
	if node == nil {
		return fmt.Errorf("node %s: the API server has no such node (is --node-name the downward API's spec.nodeName?)", r.cfg.NodeName)
	}
	want := nodeCondition(rep)
	changed, err := r.patchCondition(ctx, node, want)
	if err != nil {
		return err
	}
	tainted := ""
	if r.cfg.TaintOnError {
		t, err := r.syncTaint(ctx, r.cachedNode(), nodeTaint(rep))
		if err != nil {
			return err
		}
		if t != nil {
			tainted = "; tainted " + t.ToString()
		}
	}
	if changed {
		typ, reason := corev1.EventTypeNormal, ReasonNodeHealthy
		if want.Status == corev1.ConditionFalse {
			typ, reason = corev1.EventTypeWarning, ReasonNodeUnhealthy
		}
		r.recorder.Event(r.nodeRef(), typ, reason, clip(string(ConditionType)+" is "+string(want.Status)+
			" ("+want.Reason+"): "+want.Message+tainted))
		r.log.Info("node condition updated", "node", r.cfg.NodeName, "type", string(ConditionType),
			"status", string(want.Status), "reason", want.Reason, "message", want.Message)
	}
	return nil
}

func (r *Reporter) nodeRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.cfg.NodeName, UID: types.UID(r.nodeUID())}
}

// hasCondition reports whether node's condition of want's type says what
// want says (status, reason, message).
func hasCondition(node *corev1.Node, want corev1.NodeCondition) (found, same bool) {
	for _, c := range node.Status.Conditions {
		if c.Type == want.Type {
			return true, c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message
		}
	}
	return false, false
}

// patchCondition writes the condition when its status, reason or message
// differs from the node's; the transition time moves only with the status.
// It reports whether the status changed.
//
// Equivalent to: kubectl patch node $NODE --subresource=status --type=strategic -p '{"status":{"conditions":[…]}}'
func (r *Reporter) patchCondition(ctx context.Context, node *corev1.Node, want corev1.NodeCondition) (bool, error) {
	if _, same := hasCondition(node, want); same {
		return false, nil
	}
	now := metav1.NewTime(time.Now())
	want.LastHeartbeatTime, want.LastTransitionTime = now, now
	statusChanged := true
	for _, c := range node.Status.Conditions {
		if c.Type == ConditionType && c.Status == want.Status {
			want.LastTransitionTime, statusChanged = c.LastTransitionTime, false
		}
	}
	// Conditions merge by type (strategic merge): the kubelet's stay.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{want}}})
	if err != nil {
		return false, err
	}
	if _, err := r.cfg.Client.Nodes().Patch(ctx, r.cfg.NodeName, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: Component}, "status"); err != nil {
		return false, fmt.Errorf("set condition %s on node %s: %w", ConditionType, r.cfg.NodeName, err)
	}
	seeWrite(ctx, func() bool {
		n := r.cachedNode()
		_, same := hasCondition(n, want)
		return n == nil || same
	})
	return statusChanged, nil
}

// hasTaint reports whether node's TaintKey taint is want (nil: none).
func hasTaint(node *corev1.Node, want *corev1.Taint) bool {
	i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintKey })
	switch {
	case want == nil:
		return i < 0
	case i < 0:
		return false
	}
	return node.Spec.Taints[i].MatchTaint(want) && node.Spec.Taints[i].Value == want.Value
}

// syncTaint puts want (nil: none) in place of the node's TaintKey taint,
// leaving every other taint as it is. The taints are written whole with the
// node's resourceVersion, so a concurrent change by anyone else (kubelet,
// an operator) is never overwritten: the write fails with a conflict and
// the worker redoes it on the newer node its watch brings. It returns the
// taint now on the node.
//
// Equivalent to: kubectl taint node $NODE sriov-stable-cni.io/vf-unhealthy=$CHECK:NoSchedule (or …- to remove)
func (r *Reporter) syncTaint(ctx context.Context, node *corev1.Node, want *corev1.Taint) (*corev1.Taint, error) {
	if node == nil || hasTaint(node, want) {
		return want, nil
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintKey })
	if want != nil {
		taints = append(taints, *want)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	if err != nil {
		return nil, err
	}
	if _, err := r.cfg.Client.Nodes().Patch(ctx, r.cfg.NodeName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: Component}); err != nil {
		return nil, fmt.Errorf("set taint %s on node %s: %w", TaintKey, r.cfg.NodeName, err)
	}
	seeWrite(ctx, func() bool {
		n := r.cachedNode()
		return n == nil || hasTaint(n, want)
	})
	if want != nil {
		r.log.Warn("node tainted while the doctor reports an error", "node", r.cfg.NodeName, "taint", want.ToString())
	} else {
		r.log.Info("node taint removed: no error finding left", "node", r.cfg.NodeName, "key", TaintKey)
	}
	return want, nil
}
