package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// The copies client-go's caches and schemes need (runtime.Object), written
// out for these few types rather than generated: a test fills every field
// and checks that a copy shares no memory with its original.

// DeepCopyObject copies s as a runtime.Object.
func (s *NodeVFSet) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopy copies s, sharing nothing with it.
func (s *NodeVFSet) DeepCopy() *NodeVFSet {
	if s == nil {
		return nil
	}
	out := &NodeVFSet{TypeMeta: s.TypeMeta}
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.VFs = copyVFs(s.Spec.VFs)
	out.Status.ObservedGeneration = s.Status.ObservedGeneration
	out.Status.Findings = CopyFindings(s.Status.Findings)
	return out
}

// DeepCopyObject copies l as a runtime.Object.
func (l *NodeVFSetList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &NodeVFSetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]NodeVFSet, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

func copyVFs(vfs []VF) []VF {
	if vfs == nil {
		return nil
	}
	out := make([]VF, len(vfs))
	for i, v := range vfs {
		out[i] = v
		out[i].PortGUIDs = slices.Clone(v.PortGUIDs)
		v.Since.DeepCopyInto(&out[i].Since)
		out[i].Pod = copyPod(v.Pod)
	}
	return out
}

// CopyFindings copies findings, sharing nothing with them.
func CopyFindings(fs []Finding) []Finding {
	if fs == nil {
		return nil
	}
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = f
		if f.Others != nil {
			out[i].Others = make([]Holder, len(f.Others))
			for j, h := range f.Others {
				out[i].Others[j] = Holder{Node: h.Node, PCI: h.PCI, Pod: copyPod(h.Pod)}
			}
		}
	}
	return out
}

func copyPod(p *PodRef) *PodRef {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
