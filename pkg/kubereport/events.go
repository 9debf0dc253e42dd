package kubereport

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// Reasons of the events on pods.
const (
	ReasonDrift     = "VFDrift"          // Warning: the pod's VF drifted
	ReasonRecovered = "VFDriftRecovered" // Normal: a drift cleared
	ReasonRepaired  = "VFRepaired"       // Normal: the monitor put the VF right
)

// maxEventMessage is what the API server keeps of an event's message.
const maxEventMessage = 1024

// Drift implements monitor.Notifier: a Warning VFDrift on the pod for the
// reasons newly seen, a Normal VFDriftRecovered for those that cleared.
// Records without the pod's identity (earlier releases, runtimes that pass
// no K8S_POD_* arguments) have no pod to tell.
func (r *Reporter) Drift(rec *state.Record, appeared []drift.Finding, cleared []drift.Reason) {
	ref := podRef(rec)
	if ref == nil {
		return
	}
	if len(appeared) > 0 {
		r.recorder.Event(ref, corev1.EventTypeWarning, ReasonDrift, driftMessage(rec, appeared))
	}
	if len(cleared) > 0 {
		r.recorder.Event(ref, corev1.EventTypeNormal, ReasonRecovered, recoveredMessage(rec, cleared))
	}
}

// Repaired implements monitor.Notifier and janitor.Notifier: a Normal
// VFRepaired on the pod; none for a free VF the janitor repaired, which
// has no pod (its repair is logged and counted).
func (r *Reporter) Repaired(rec *state.Record, kind, detail string) {
	if ref := podRef(rec); ref != nil {
		r.recorder.Event(ref, corev1.EventTypeNormal, ReasonRepaired, clip(attachmentName(rec)+" repaired ("+kind+"): "+detail))
	}
}

// podRef is the event's involved object: the pod of the record, by
// namespace, name and UID as ADD read them from CNI_ARGS; nil when the
// record does not name its pod.
func podRef(rec *state.Record) *corev1.ObjectReference {
	if rec.PodNamespace == "" || rec.PodName == "" {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: rec.PodNamespace, Name: rec.PodName,
		UID: types.UID(rec.PodUID)}
}

// attachmentName says which VF of the pod: "VF 0000:18:00.2 (net1, network ib-vf)".
func attachmentName(rec *state.Record) string {
	return fmt.Sprintf("VF %s (%s, network %s)", rec.PCI, rec.IfName, rec.Network)
}

func driftMessage(rec *state.Record, appeared []drift.Finding) string {
	parts := make([]string, len(appeared))
	for i, f := range appeared {
		parts[i] = f.String()
	}
	return clip(attachmentName(rec) + " drifted: " + strings.Join(parts, "; "))
}

func recoveredMessage(rec *state.Record, cleared []drift.Reason) string {
	parts := make([]string, len(cleared))
	for i, c := range cleared {
		parts[i] = string(c)
	}
	return clip(attachmentName(rec) + " recovered from: " + strings.Join(parts, ", "))
}

// clip keeps a message within what the API server stores, cutting at a
// rune boundary.
func clip(s string) string {
	if len(s) <= maxEventMessage {
		return s
	}
	const more = " …"
	s = s[:maxEventMessage-len(more)]
	s = strings.ToValidUTF8(s, "")
	return s + more
}
