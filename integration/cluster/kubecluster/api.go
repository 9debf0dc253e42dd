package kubecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// resourceNameAnnotation ties a NAD to the extended resource whose device
// Multus hands its plugins (as deviceID).
const resourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"

// CreateNAD creates a NetworkAttachmentDefinition of Namespace: the chain
// of plugins, on a device of resource.
func (c *Cluster) CreateNAD(ctx context.Context, name, resource string, plugins ...map[string]any) error {
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	if err != nil {
		return err
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace,
			Annotations: map[string]string{resourceNameAnnotation: resource}},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(conf)},
	}
	_, err = c.NADs.K8sCniCncfIoV1().NetworkAttachmentDefinitions(Namespace).Create(ctx, nad, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create NAD %s: %w", name, err)
	}
	return nil
}

// Allocations asks kubelet's PodResources API (the socket Multus reads)
// which devices of a resource each pod of Namespace holds.
func Allocations(ctx context.Context, resource string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix:///var/lib/kubelet/pod-resources/kubelet.sock",
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresources.NewPodResourcesListerClient(conn).List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List: %w", err)
	}
	out := map[string][]string{}
	for _, p := range resp.PodResources {
		if p.Namespace != Namespace {
			continue
		}
		for _, ctr := range p.Containers {
			for _, d := range ctr.Devices {
				if d.ResourceName == resource {
					out[p.Name] = append(out[p.Name], d.DeviceIds...)
				}
			}
		}
	}
	return out, nil
}

// Apply server-side applies the objects, as kubectl apply --server-side
// (field manager sriov-e2e, conflicts forced).
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		r := c.Dynamic.Resource(m.Resource)
		opts := metav1.ApplyOptions{FieldManager: "sriov-e2e", Force: true}
		if o.GetNamespace() != "" {
			_, err = r.Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o, opts)
		} else {
			_, err = r.Apply(ctx, o.GetName(), o, opts)
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// EventsOf lists the events about an object of Namespace (or, with kind
// Node, about a node) with a reason, oldest first.
func (c *Cluster) EventsOf(ctx context.Context, kind, name, reason string) ([]corev1.Event, error) {
	ns := Namespace
	if kind == "Node" {
		ns = metav1.NamespaceDefault
	}
	sel := "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=" + reason
	list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return list.Items, nil
}

// NodeCondition returns the node's condition of a type (nil without one)
// and the node.
func (c *Cluster) NodeCondition(ctx context.Context, typ string) (*corev1.NodeCondition, *corev1.Node, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == typ {
			return &n.Status.Conditions[i], n, nil
		}
	}
	return nil, n, nil
}

// NodeTaint returns the node's taint of a key (nil without one).
func NodeTaint(n *corev1.Node, key string) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == key {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}
