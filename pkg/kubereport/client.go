package kubereport

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the part of the Kubernetes API the reporter uses: nodes and
// events (core/v1), ResourceSlices and DeviceTaintRules (resource.k8s.io,
// the rules at each version that serves them) and discovery of one group
// version. NewClient builds it from client-go's generic typed client
// (gentype) over a scheme of those four group versions alone. client-go's
// generated clients would register every API group's types at init (its
// kubernetes/scheme, 56 group versions): 4 MiB of the agent's RSS for
// types it never sees (docs/performance.md). Tests adapt client-go's fake
// clientset to it.
type Client interface {
	Nodes() NodeClient
	Events(namespace string) EventClient
	ResourceSlices() ListWatchClient[*resourcev1.ResourceSliceList]
	RulesV1() RuleClient[resourcev1.DeviceTaintRule, resourcev1.DeviceTaintRuleList]
	RulesV1beta2() RuleClient[resourcev1beta2.DeviceTaintRule, resourcev1beta2.DeviceTaintRuleList]
	RulesV1alpha3() RuleClient[resourcev1alpha3.DeviceTaintRule, resourcev1alpha3.DeviceTaintRuleList]
	// ServerResources is the discovery document of groupVersion ("group/version"):
	// an error satisfying apierrors.IsNotFound when it is not served.
	ServerResources(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// ListWatchClient lists and watches one resource.
type ListWatchClient[L any] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NodeClient is what the reporter does to nodes: watch its own, patch its
// taints and (subresource "status") its condition.
type NodeClient interface {
	ListWatchClient[*corev1.NodeList]
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions,
		subresources ...string) (*corev1.Node, error)
}

// EventClient is what client-go's event broadcaster does to events.
type EventClient interface {
	Create(ctx context.Context, e *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Update(ctx context.Context, e *corev1.Event, opts metav1.UpdateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions,
		subresources ...string) (*corev1.Event, error)
}

// RuleClient is the part of a DeviceTaintRule client the reporter uses;
// every version's client has it, with its own types.
type RuleClient[T, L any] interface {
	ListWatchClient[*L]
	Create(ctx context.Context, rule *T, opts metav1.CreateOptions) (*T, error)
	Update(ctx context.Context, rule *T, opts metav1.UpdateOptions) (*T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// apiScheme knows the types of the group versions the reporter talks to.
func apiScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourcev1.AddToScheme,
		resourcev1beta2.AddToScheme, resourcev1alpha3.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type client struct {
	params   runtime.ParameterCodec
	core     rest.Interface
	v1       rest.Interface
	v1beta2  rest.Interface
	v1alpha3 rest.Interface
}

// NewClient builds the reporter's Client for cfg the way client-go's
// clientset does: one HTTP client (one connection pool) and one rate
// limiter shared by every group version.
func NewClient(cfg *rest.Config) (Client, error) {
	s, err := apiScheme()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := rest.CopyConfig(cfg)
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: burst %d must be positive when QPS (%g) is", c.Burst, c.QPS)
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	codecs := rest.CodecFactoryForGeneratedClient(s, serializer.NewCodecFactory(s)).WithoutConversion()
	restFor := func(apiPath string, gv schema.GroupVersion) (rest.Interface, error) {
		gc := rest.CopyConfig(c)
		gc.APIPath, gc.GroupVersion, gc.NegotiatedSerializer = apiPath, &gv, codecs
		rc, err := rest.RESTClientForConfigAndClient(gc, hc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %s: %w", gv, err)
		}
		return rc, nil
	}
	out := &client{params: runtime.NewParameterCodec(s)}
	if out.core, err = restFor("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if out.v1, err = restFor("/apis", resourcev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if out.v1beta2, err = restFor("/apis", resourcev1beta2.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if out.v1alpha3, err = restFor("/apis", resourcev1alpha3.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *client) Nodes() NodeClient {
	return gentype.NewClientWithList("nodes", c.core, c.params, "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} },
		gentype.PrefersProtobuf[*corev1.Node]())
}

func (c *client) Events(namespace string) EventClient {
	return gentype.NewClient("events", c.core, c.params, namespace,
		func() *corev1.Event { return &corev1.Event{} }, gentype.PrefersProtobuf[*corev1.Event]())
}

func (c *client) ResourceSlices() ListWatchClient[*resourcev1.ResourceSliceList] {
	return gentype.NewClientWithList("resourceslices", c.v1, c.params, "",
		func() *resourcev1.ResourceSlice { return &resourcev1.ResourceSlice{} },
		func() *resourcev1.ResourceSliceList { return &resourcev1.ResourceSliceList{} },
		gentype.PrefersProtobuf[*resourcev1.ResourceSlice]())
}

func (c *client) RulesV1() RuleClient[resourcev1.DeviceTaintRule, resourcev1.DeviceTaintRuleList] {
	return gentype.NewClientWithList("devicetaintrules", c.v1, c.params, "",
		func() *resourcev1.DeviceTaintRule { return &resourcev1.DeviceTaintRule{} },
		func() *resourcev1.DeviceTaintRuleList { return &resourcev1.DeviceTaintRuleList{} },
		gentype.PrefersProtobuf[*resourcev1.DeviceTaintRule]())
}

func (c *client) RulesV1beta2() RuleClient[resourcev1beta2.DeviceTaintRule, resourcev1beta2.DeviceTaintRuleList] {
	return gentype.NewClientWithList("devicetaintrules", c.v1beta2, c.params, "",
		func() *resourcev1beta2.DeviceTaintRule { return &resourcev1beta2.DeviceTaintRule{} },
		func() *resourcev1beta2.DeviceTaintRuleList { return &resourcev1beta2.DeviceTaintRuleList{} },
		gentype.PrefersProtobuf[*resourcev1beta2.DeviceTaintRule]())
}

func (c *client) RulesV1alpha3() RuleClient[resourcev1alpha3.DeviceTaintRule, resourcev1alpha3.DeviceTaintRuleList] {
	return gentype.NewClientWithList("devicetaintrules", c.v1alpha3, c.params, "",
		func() *resourcev1alpha3.DeviceTaintRule { return &resourcev1alpha3.DeviceTaintRule{} },
		func() *resourcev1alpha3.DeviceTaintRuleList { return &resourcev1alpha3.DeviceTaintRuleList{} },
		gentype.PrefersProtobuf[*resourcev1alpha3.DeviceTaintRule]())
}

// discoveryTimeout bounds one discovery request, as client-go's discovery
// client does.
const discoveryTimeout = 32 * time.Second

// ServerResources reads /apis/GROUP/VERSION (/api/v1 for the core group).
//
// Equivalent to: kubectl get --raw /apis/$GROUP/$VERSION
func (c *client) ServerResources(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error) {
	gv, err := schema.ParseGroupVersion(groupVersion)
	if err != nil {
		return nil, err
	}
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	raw, err := c.core.Get().AbsPath(path).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	list := &metav1.APIResourceList{}
	if err := json.Unmarshal(raw, list); err != nil {
		return nil, fmt.Errorf("discovery document %s: %w", path, err)
	}
	return list, nil
}

// eventSink is client-go's record.EventSink over an EventClient: each
// event goes to its own namespace.
type eventSink struct {
	ctx context.Context
	c   Client
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Create(s.ctx, e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Update(s.ctx, e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.c.Events(e.Namespace).Patch(s.ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
