// Package fabrictest is the NodeVFSet API for unit tests of the ledger's
// sync logic: client-go's object tracker (the fake clientset's store and
// watch) behind the client interfaces the agent and the controller use,
// applying the way the API server does for a resource whose spec has one
// field manager and whose status another. The end-to-end tests run a real
// kube-apiserver.
package fabrictest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

var gvr = v1alpha1.GroupVersionResource

// Tracker serves NodeVFSets. An apply of the object (metadata and spec) is
// accepted from SpecManager, forced, and bumps the generation when the
// spec changed; an apply of the status subresource from StatusManager
// replaces the status (what it no longer names is dropped, as for the
// status's only manager). Anything else is refused.
type Tracker struct {
	T                          clienttesting.ObjectTracker
	SpecManager, StatusManager string
	// SpecApplies and StatusApplies count the accepted applies.
	SpecApplies, StatusApplies atomic.Int64
}

// New returns an empty tracker.
func New(t testing.TB, specManager, statusManager string) *Tracker {
	s, err := fabricclient.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return &Tracker{T: clienttesting.NewObjectTracker(s, serializer.NewCodecFactory(s).UniversalDecoder()),
		SpecManager: specManager, StatusManager: statusManager}
}

// IsWatchListSemanticsUnSupported: the tracker sends no initial-events
// bookmark, so an informer must list (client-go's fake clientset says the
// same).
func (c *Tracker) IsWatchListSemanticsUnSupported() bool { return true }

// name is the object a metadata.name field selector asks for ("" for
// all); the tracker itself ignores field selectors.
func name(o metav1.ListOptions) (string, error) {
	if o.FieldSelector == "" {
		return "", nil
	}
	sel, err := fields.ParseSelector(o.FieldSelector)
	if err != nil {
		return "", err
	}
	if v, ok := sel.RequiresExactMatch("metadata.name"); ok && len(sel.Requirements()) == 1 {
		return v, nil
	}
	return "", fmt.Errorf("field selector %q: only metadata.name=<name> is served", o.FieldSelector)
}

// Get returns a copy of the named object.
func (c *Tracker) Get(_ context.Context, n string, _ metav1.GetOptions) (*v1alpha1.NodeVFSet, error) {
	obj, err := c.T.Get(gvr, "", n)
	if err != nil {
		return nil, err
	}
	return obj.(*v1alpha1.NodeVFSet), nil
}

// List lists the objects (the one a field selector names).
func (c *Tracker) List(_ context.Context, o metav1.ListOptions) (*v1alpha1.NodeVFSetList, error) {
	only, err := name(o)
	if err != nil {
		return nil, err
	}
	obj, err := c.T.List(gvr, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind), "", o)
	if err != nil {
		return nil, err
	}
	l := obj.(*v1alpha1.NodeVFSetList)
	if only != "" {
		var keep []v1alpha1.NodeVFSet
		for _, s := range l.Items {
			if s.Name == only {
				keep = append(keep, s)
			}
		}
		l.Items = keep
	}
	return l, nil
}

// Watch watches the objects (the one a field selector names).
func (c *Tracker) Watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	only, err := name(o)
	if err != nil {
		return nil, err
	}
	w, err := c.T.Watch(gvr, "", o)
	if err != nil || only == "" {
		return w, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		s, ok := e.Object.(*v1alpha1.NodeVFSet)
		return e, !ok || s.Name == only
	}), nil
}

// Patch takes the applies described at Tracker.
func (c *Tracker) Patch(_ context.Context, n string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*v1alpha1.NodeVFSet, error) {
	if pt != types.ApplyPatchType {
		return nil, fmt.Errorf("a %s patch: only applies are served", pt)
	}
	var applied v1alpha1.NodeVFSet
	if err := json.Unmarshal(data, &applied); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	cur, err := c.Get(context.Background(), n, metav1.GetOptions{})
	switch {
	case len(sub) == 1 && sub[0] == "status" && opts.FieldManager == c.StatusManager:
		if len(applied.Spec.VFs) > 0 {
			return nil, fmt.Errorf("the status apply names spec: %s", data)
		}
		if err != nil {
			return nil, err
		}
		cur.Status = applied.Status
		c.StatusApplies.Add(1)
		return cur, c.T.Update(gvr, cur, "")
	case len(sub) == 0 && opts.FieldManager == c.SpecManager && opts.Force != nil && *opts.Force:
		if !reflect.DeepEqual(applied.Status, v1alpha1.NodeVFSetStatus{}) {
			return nil, fmt.Errorf("the spec apply names status: %s", data)
		}
		c.SpecApplies.Add(1)
		if apierrors.IsNotFound(err) {
			applied.Generation = 1
			return &applied, c.T.Add(&applied)
		}
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(cur.Spec, applied.Spec) {
			cur.Generation++
		}
		cur.Spec, cur.OwnerReferences = applied.Spec, applied.OwnerReferences
		return cur, c.T.Update(gvr, cur, "")
	}
	return nil, errors.New("not an apply of spec by " + c.SpecManager + " (forced) nor of status by " + c.StatusManager +
		": " + opts.FieldManager + fmt.Sprint(sub))
}

// Put stores node's spec as its agent's apply would, bumping the
// generation.
func (c *Tracker) Put(t testing.TB, node string, vfs ...v1alpha1.VF) {
	t.Helper()
	cur, err := c.Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		s := &v1alpha1.NodeVFSet{ObjectMeta: metav1.ObjectMeta{Name: node, Generation: 1,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID("uid-" + node)}}},
			Spec: v1alpha1.NodeVFSetSpec{VFs: vfs}}
		if err := c.T.Add(s); err != nil {
			t.Fatal(err)
		}
		return
	}
	cur.Spec.VFs, cur.Generation = vfs, cur.Generation+1
	if err := c.T.Update(gvr, cur, ""); err != nil {
		t.Fatal(err)
	}
}

// Status returns node's status.
func (c *Tracker) Status(t testing.TB, node string) v1alpha1.NodeVFSetStatus {
	t.Helper()
	s, err := c.Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Status
}

// Object returns node's object, or nil.
func (c *Tracker) Object(node string) *v1alpha1.NodeVFSet {
	s, err := c.Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}
