package kubereport

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// ruleVersions are the resource.k8s.io versions that serve DeviceTaintRule,
// newest first: v1 from Kubernetes 1.37, v1beta2 in 1.36 (off by default),
// v1alpha3 in 1.33 to 1.35. The fields the agent writes are the same in all
// three.
var ruleVersions = []string{"v1", "v1beta2", "v1alpha3"}

// draAPI is what the API server serves of what the device taints need.
type draAPI struct {
	slices bool   // ResourceSlices in resource.k8s.io/v1 (1.34 and later)
	rules  string // the newest version serving DeviceTaintRules, "" for none
}

// discoverDRA asks the API server's discovery which of the resources the
// device taints need it serves. A version it does not serve answers 404;
// any other error is the caller's to retry.
//
// Equivalent to: kubectl api-resources --api-group=resource.k8s.io
func discoverDRA(ctx context.Context, c Client) (draAPI, error) {
	var api draAPI
	for _, v := range ruleVersions {
		list, err := c.ServerResources(ctx, resourcev1.GroupName+"/"+v)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return draAPI{}, fmt.Errorf("discover %s/%s: %w", resourcev1.GroupName, v, err)
		}
		if ctx.Err() != nil {
			return draAPI{}, ctx.Err()
		}
		for _, r := range list.APIResources {
			switch {
			case r.Name == "resourceslices" && v == "v1":
				api.slices = true
			case r.Name == "devicetaintrules" && api.rules == "":
				api.rules = v
			}
		}
	}
	return api, nil
}

// ruleAPI is DeviceTaintRule at one served version. The reporter works with
// resourcev1's types; each call converts to and from the served version.
type ruleAPI interface {
	version() string
	listWatch(labelSelector string) cache.ListerWatcher
	example() runtime.Object
	asV1(obj any) (*resourcev1.DeviceTaintRule, error)
	create(ctx context.Context, rule *resourcev1.DeviceTaintRule) (*resourcev1.DeviceTaintRule, error)
	update(ctx context.Context, rule *resourcev1.DeviceTaintRule) (*resourcev1.DeviceTaintRule, error)
	delete(ctx context.Context, name string, uid types.UID) error
}

// rulesAt returns the DeviceTaintRule client of version v.
func rulesAt(c Client, v string) ruleAPI {
	switch v {
	case "v1beta2":
		return typedRules[resourcev1beta2.DeviceTaintRule, resourcev1beta2.DeviceTaintRuleList]{v: v, c: c.RulesV1beta2(), cs: c}
	case "v1alpha3":
		return typedRules[resourcev1alpha3.DeviceTaintRule, resourcev1alpha3.DeviceTaintRuleList]{v: v, c: c.RulesV1alpha3(), cs: c}
	}
	return typedRules[resourcev1.DeviceTaintRule, resourcev1.DeviceTaintRuleList]{v: "v1", c: c.RulesV1(), cs: c}
}

type typedRules[T, L any] struct {
	v  string
	c  RuleClient[T, L]
	cs Client // whether it streams lists, for the reflector
}

func (t typedRules[T, L]) version() string { return t.v }

func (t typedRules[T, L]) example() runtime.Object { return any(new(T)).(runtime.Object) }

func (t typedRules[T, L]) listWatch(sel string) cache.ListerWatcher {
	return listWatch(t.c, func(o *metav1.ListOptions) { o.LabelSelector = sel }, t.cs)
}

// convert copies in into out through their JSON field names, which the
// DeviceTaintRule versions share.
func convert(in, out any) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		return err
	}
	delete(u, "apiVersion")
	delete(u, "kind")
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, out)
}

func (t typedRules[T, L]) asV1(obj any) (*resourcev1.DeviceTaintRule, error) {
	if r, ok := obj.(*resourcev1.DeviceTaintRule); ok {
		return r, nil
	}
	if _, ok := obj.(*T); !ok {
		return nil, fmt.Errorf("a %T where a resource.k8s.io/%s DeviceTaintRule belongs", obj, t.v)
	}
	out := &resourcev1.DeviceTaintRule{}
	return out, convert(obj, out)
}

func (t typedRules[T, L]) from(rule *resourcev1.DeviceTaintRule) (*T, error) {
	if r, ok := any(rule).(*T); ok {
		return r, nil
	}
	out := new(T)
	return out, convert(rule, out)
}

func (t typedRules[T, L]) create(ctx context.Context, rule *resourcev1.DeviceTaintRule) (*resourcev1.DeviceTaintRule, error) {
	in, err := t.from(rule)
	if err != nil {
		return nil, err
	}
	out, err := t.c.Create(ctx, in, metav1.CreateOptions{FieldManager: Component})
	if err != nil {
		return nil, err
	}
	return t.asV1(out)
}

func (t typedRules[T, L]) update(ctx context.Context, rule *resourcev1.DeviceTaintRule) (*resourcev1.DeviceTaintRule, error) {
	in, err := t.from(rule)
	if err != nil {
		return nil, err
	}
	out, err := t.c.Update(ctx, in, metav1.UpdateOptions{FieldManager: Component})
	if err != nil {
		return nil, err
	}
	return t.asV1(out)
}

func (t typedRules[T, L]) delete(ctx context.Context, name string, uid types.UID) error {
	return t.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}
