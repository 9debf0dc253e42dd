// Package fabricclient is the typed client of NodeVFSets that the node
// agent and the fabric controller share: client-go's generic client over
// a REST client for the ledger's group, JSON on the wire (a custom
// resource has no protobuf).
package fabricclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"

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
