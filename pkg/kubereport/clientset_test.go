package kubereport

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// clientset is the reporter's Client over client-go's fake clientset. It
// says, as the fake does, that the fake cannot stream lists, so the
// informers list and watch the fake as they would a real API server
// without WatchList.
type clientset struct{ cs *fake.Clientset }

func (c clientset) Nodes() NodeClient { return c.cs.CoreV1().Nodes() }

func (c clientset) Events(ns string) EventClient { return c.cs.CoreV1().Events(ns) }

func (c clientset) ResourceSlices() ListWatchClient[*resourcev1.ResourceSliceList] {
	return c.cs.ResourceV1().ResourceSlices()
}

func (c clientset) RulesV1() RuleClient[resourcev1.DeviceTaintRule, resourcev1.DeviceTaintRuleList] {
	return c.cs.ResourceV1().DeviceTaintRules()
}

func (c clientset) RulesV1beta2() RuleClient[resourcev1beta2.DeviceTaintRule, resourcev1beta2.DeviceTaintRuleList] {
	return c.cs.ResourceV1beta2().DeviceTaintRules()
}

func (c clientset) RulesV1alpha3() RuleClient[resourcev1alpha3.DeviceTaintRule, resourcev1alpha3.DeviceTaintRuleList] {
	return c.cs.ResourceV1alpha3().DeviceTaintRules()
}

func (c clientset) ServerResources(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	return c.cs.Discovery().ServerResourcesForGroupVersion(gv)
}

func (c clientset) IsWatchListSemanticsUnSupported() bool {
	return c.cs.IsWatchListSemanticsUnSupported()
}

var _ Client = clientset{}
