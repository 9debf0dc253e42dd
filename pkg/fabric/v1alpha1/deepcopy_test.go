package v1alpha1

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/randfill"
)

// A copy of an object with every field filled (randfill fills new fields
// too) equals it, and filling the copy anew leaves the original as it
// was: the copy shares no slice, map or pointer with it.
func TestDeepCopyShares(t *testing.T) {
	f := randfill.NewWithSeed(1).NilChance(0).NumElements(2, 3)
	for range 20 {
		var orig NodeVFSetList
		f.Fill(&orig)
		for i := range orig.Items {
			orig.Items[i].ManagedFields = nil // random bytes are not JSON
		}
		before, err := json.Marshal(&orig)
		if err != nil {
			t.Fatal(err)
		}
		cp := orig.DeepCopyObject().(*NodeVFSetList)
		if diff := cmp.Diff(&orig, cp); diff != "" {
			t.Fatalf("copy differs from the original (-orig +copy):\n%s", diff)
		}
		refill(f, cp)
		after, _ := json.Marshal(&orig)
		if string(before) != string(after) {
			t.Fatalf("filling the copy changed the original:\nbefore %s\nafter  %s", before, after)
		}
	}
}

// refill writes new values into every element the copy holds, in place,
// so that memory shared with the original would show.
func refill(f *randfill.Filler, l *NodeVFSetList) {
	for i := range l.Items {
		s := &l.Items[i]
		for k := range s.Labels {
			s.Labels[k] = "changed"
		}
		for j := range s.OwnerReferences {
			f.Fill(&s.OwnerReferences[j])
		}
		for j := range s.Spec.VFs {
			v := &s.Spec.VFs[j]
			for k := range v.PortGUIDs {
				v.PortGUIDs[k] = "changed"
			}
			if v.Pod != nil {
				v.Pod.Name = "changed"
			}
			f.Fill(&v.Since)
		}
		for j := range s.Status.Findings {
			for k := range s.Status.Findings[j].Others {
				h := &s.Status.Findings[j].Others[k]
				h.Node = "changed"
				if h.Pod != nil {
					h.Pod.UID = "changed"
				}
			}
		}
	}
}
