package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// FieldManager is the node agent's name in the NodeVFSet's managed fields:
// it owns spec; the controller owns status.
const FieldManager = "sriov-stable-agent"

// Client is what the publisher needs of the API: fabricclient.Client.
type Client interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.NodeVFSet, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.NodeVFSet, error)
}

// Publisher writes one node's NodeVFSet. It is not safe for concurrent
// use: the agent calls it from one goroutine.
type Publisher struct {
	client  Client
	node    string
	nodeUID types.UID
	// published is the spec as last applied, nil until the first apply
	// (or the first read of the object) succeeded.
	published []v1alpha1.VF
	known     bool
	// owner: the object read names another owner (or none): apply even
	// when the VFs are the same.
	owner bool
	// Applies counts the writes made (an apply that changed nothing on
	// the server still counts: the publisher made it).
	Applies int
}

// New returns a publisher for node (its Node object's UID owns the
// NodeVFSet, so the object goes when the node does).
func New(client Client, node string, nodeUID types.UID) *Publisher {
	return &Publisher{client: client, node: node, nodeUID: nodeUID}
}

// Published returns the VFs as last published (their Since is what
// Identities keeps), reading the node's object once when none was
// published in this run: an agent restarted keeps its VFs' Since, so who
// came first does not change with a restart.
func (p *Publisher) Published(ctx context.Context) ([]v1alpha1.VF, error) {
	if p.known {
		return p.published, nil
	}
	cur, err := p.client.Get(ctx, p.node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("read NodeVFSet %s: %w", p.node, err)
	default:
		p.published = cur.Spec.VFs
		p.owner = !slices.ContainsFunc(cur.OwnerReferences, func(o metav1.OwnerReference) bool {
			return o.Kind == "Node" && o.UID == p.nodeUID
		})
	}
	p.known = true
	return p.published, nil
}

// Publish applies vfs as the node's spec when they differ from what was
// published last; it reports whether it wrote.
func (p *Publisher) Publish(ctx context.Context, vfs []v1alpha1.VF) (bool, error) {
	if _, err := p.Published(ctx); err != nil {
		return false, err
	}
	if vfs == nil {
		vfs = []v1alpha1.VF{}
	}
	if p.published != nil && !p.owner && equalVFs(p.published, vfs) {
		return false, nil
	}
	obj := &v1alpha1.NodeVFSet{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: p.node, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: p.node, UID: p.nodeUID,
		}}},
		Spec: v1alpha1.NodeVFSetSpec{VFs: vfs},
	}
	data, err := json.Marshal(applied{obj})
	if err != nil {
		return false, fmt.Errorf("encode NodeVFSet %s: %w", p.node, err)
	}
	force := true
	p.Applies++
	got, err := p.client.Patch(ctx, p.node, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return true, fmt.Errorf("apply NodeVFSet %s (%d VFs): %w", p.node, len(vfs), err)
	}
	p.published, p.owner = got.Spec.VFs, false
	if p.published == nil {
		p.published = []v1alpha1.VF{}
	}
	return true, nil
}

// applied is the object as the agent applies it: metadata and spec, never
// a status (the controller's: an apply naming status fields would take
// them over).
type applied struct{ *v1alpha1.NodeVFSet }

func (a applied) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta      `json:"metadata"`
		Spec            v1alpha1.NodeVFSetSpec `json:"spec"`
	}{a.TypeMeta, a.ObjectMeta, a.Spec})
}

// equalVFs compares two specs as the server stores them: times at the
// second (what a metav1.Time survives a round trip with), nil and empty
// lists alike.
func equalVFs(a, b []v1alpha1.VF) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Since.Unix() != y.Since.Unix() {
			return false
		}
		x.Since, y.Since = metav1.Time{}, metav1.Time{}
		if len(x.PortGUIDs) == 0 && len(y.PortGUIDs) == 0 {
			x.PortGUIDs, y.PortGUIDs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
