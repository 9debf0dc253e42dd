package fabricclient_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabrictest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// The informer holds the objects its field selector names, without their
// managed fields (what the server keeps of them stays).
func TestInformerSelectsAndStripsManagedFields(t *testing.T) {
	api := fabrictest.New(t, "agent", "controller")
	managed := []metav1.ManagedFieldsEntry{{Manager: "agent", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "sriov-stable-cni.io/v1alpha1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:vfs":{}}}`)}}}
	for _, n := range []string{"gpu-a", "gpu-b"} {
		s := &v1alpha1.NodeVFSet{ObjectMeta: metav1.ObjectMeta{Name: n, ManagedFields: managed},
			Spec: v1alpha1.NodeVFSetSpec{VFs: []v1alpha1.VF{{PCI: "0000:18:00.2", NodeGUID: "ba3f:d200:0000:0001", Since: metav1.NewTime(time.Unix(1, 0))}}}}
		if err := api.T.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		selector string
		want     []string
	}{{"", []string{"gpu-a", "gpu-b"}}, {"metadata.name=gpu-b", []string{"gpu-b"}}} {
		inf := fabricclient.NewInformer(api, tc.selector)
		stop := make(chan struct{})
		go inf.Run(stop)
		if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
			t.Fatal("the informer did not sync")
		}
		keys := inf.GetStore().ListKeys()
		if len(keys) != len(tc.want) {
			t.Errorf("selector %q: informer holds %v, want %v", tc.selector, keys, tc.want)
		}
		for _, n := range tc.want {
			obj, ok, err := inf.GetStore().GetByKey(n)
			if err != nil || !ok {
				t.Errorf("selector %q: %s not in the informer (%v)", tc.selector, n, err)
				continue
			}
			if s := obj.(*v1alpha1.NodeVFSet); len(s.ManagedFields) != 0 || len(s.Spec.VFs) != 1 {
				t.Errorf("selector %q: %s cached with %d managed fields entries and %d VFs, want none and 1", tc.selector, n, len(s.ManagedFields), len(s.Spec.VFs))
			}
		}
		close(stop)
	}
	if s, err := api.Get(t.Context(), "gpu-a", metav1.GetOptions{}); err != nil || len(s.ManagedFields) != 1 {
		t.Errorf("the server's object lost its managed fields: %v, %v", s, err)
	}
}
