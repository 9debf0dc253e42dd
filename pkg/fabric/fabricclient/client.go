// Package fabricclient is the typed client of NodeVFSets that the node
// agent and the fabric controller share: client-go's generic client over
// a REST client for the ledger's group, JSON on the wire (a custom
// resource has no protobuf).
package fabricclient

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// Client reads and writes NodeVFSets.
type Client = *gentype.ClientWithList[*v1alpha1.NodeVFSet, *v1alpha1.NodeVFSetList]

// Scheme knows NodeVFSet and the meta types a request carries.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// New returns a client of NodeVFSets for cfg.
func New(cfg *rest.Config) (Client, error) {
	s, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("fabric client: %w", err)
	}
	rc, err := NewREST(cfg, v1alpha1.SchemeGroupVersion, s)
	if err != nil {
		return nil, fmt.Errorf("fabric client: %w", err)
	}
	return gentype.NewClientWithList(v1alpha1.Resource, rc, runtime.NewParameterCodec(s), "",
		func() *v1alpha1.NodeVFSet { return &v1alpha1.NodeVFSet{} },
		func() *v1alpha1.NodeVFSetList { return &v1alpha1.NodeVFSetList{} }), nil
}

// NewREST is a JSON REST client of group version gv under /apis, over a
// scheme s that knows its types: what a gentype client is built on (the
// fabric's NodeVFSets, the controller's Leases).
func NewREST(cfg *rest.Config, gv schema.GroupVersion, s *runtime.Scheme) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "/apis", &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// Lister is what an informer of NodeVFSets needs of a client: Client, or
// a test's tracker.
type Lister interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeVFSetList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer is a shared informer, without resync, of the NodeVFSets c
// serves that fieldSelector selects ("" for all of them: the controller's;
// metadata.name=<node> for a node agent's own). A client that cannot
// stream the initial list (a test's tracker) says so, and the informer
// lists instead. Its cache holds the objects without their managed
// fields, which no reader of it needs: a server-side applied NodeVFSet's
// field sets name every VF's every field again, for each manager.
func NewInformer(c Lister, fieldSelector string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if fieldSelector != "" {
				o.FieldSelector = fieldSelector
			}
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if fieldSelector != "" {
				o.FieldSelector = fieldSelector
			}
			return c.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c), &v1alpha1.NodeVFSet{}, 0, cache.Indexers{})
	// Set before the informer runs: it cannot fail.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		return obj, nil
	})
	return inf
}
