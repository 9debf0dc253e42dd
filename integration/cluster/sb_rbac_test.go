//go:build clustere2e

package cluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// TestSBRBAC (scenario 11): the agent's service account, impersonated against the API
// server (authorization Node,RBAC), may do exactly what the ClusterRoles of
// deploy/kube-reporting and deploy/kube-reporting-taint grant and is refused
// everything else; the agent itself ran scenarios 8 to 10 under them
// without a refusal.
func TestSBRBAC(t *testing.T) {
	c := mustCluster(t)
	ds := c.ensureReporting(t, componentReporting, true)
	ctx := context.Background()
	agent := c.impersonate(t, agentUser)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string) *resourcev1.DeviceTaintRule {
		device, driver := "rbac-probe", "rbac.example.com"
		return &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &driver, Device: &device},
				Taint: resourcev1.DeviceTaint{Key: "sriov-stable-cni.io/guid", Value: "rbac-probe", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-probe-", Namespace: kubecluster.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: kubecluster.Namespace, Name: "rbac-probe"},
		Reason:         "RBACProbe", Message: "probe", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "sriov-e2e"}}
	var created *corev1.Event
	t.Cleanup(func() {
		_ = c.Client.ResourceV1().DeviceTaintRules().Delete(ctx, "rbac-probe", metav1.DeleteOptions{})
		if created != nil {
			_ = c.Client.CoreV1().Events(kubecluster.Namespace).Delete(ctx, created.Name, metav1.DeleteOptions{})
		}
	})
	// Patches that change nothing: allowed or refused, they leave the node as it is.
	noop := []byte(`{}`)
	allowed := []request{
		{"list its node", func() error {
			_, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + kubecluster.NodeName})
			return err
		}},
		{"watch its node", func() error {
			return watchOnce(agent.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + kubecluster.NodeName}))
		}},
		{"patch nodes/status", func() error {
			_, err := agent.CoreV1().Nodes().PatchStatus(ctx, kubecluster.NodeName, noop)
			return err
		}},
		{"create an event", func() error {
			var err error
			created, err = agent.CoreV1().Events(kubecluster.Namespace).Create(ctx, event, metav1.CreateOptions{})
			return err
		}},
		{"patch an event", func() error {
			_, err := agent.CoreV1().Events(kubecluster.Namespace).Patch(ctx, created.Name, types.StrategicMergePatchType,
				[]byte(`{"count":2}`), metav1.PatchOptions{})
			return err
		}},
		{"list ResourceSlices", func() error {
			_, err := agent.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + kubecluster.NodeName})
			return err
		}},
		{"watch ResourceSlices", func() error {
			return watchOnce(agent.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + kubecluster.NodeName}))
		}},
		{"watch DeviceTaintRules", func() error {
			return watchOnce(agent.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{}))
		}},
		{"list DeviceTaintRules", func() error {
			_, err := agent.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a DeviceTaintRule", func() error {
			_, err := agent.ResourceV1().DeviceTaintRules().Create(ctx, rule("rbac-probe"), metav1.CreateOptions{})
			return err
		}},
		{"update a DeviceTaintRule", func() error {
			// The device taint controller writes the rule's status too.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, "rbac-probe", metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec.Taint.Value = "rbac-probe-2"
				_, err = agent.ResourceV1().DeviceTaintRules().Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
		}},
		{"delete a DeviceTaintRule", func() error {
			return agent.ResourceV1().DeviceTaintRules().Delete(ctx, "rbac-probe", metav1.DeleteOptions{})
		}},
	}
	for _, a := range allowed {
		if err := a.do(); err != nil {
			t.Errorf("%s as %s: %v, want allowed", a.what, agentUser, err)
		}
	}
	denied := c.deniedRequests(ctx, agent, node)
	for _, d := range denied {
		err := d.do()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as %s: %v, want 403 Forbidden", d.what, agentUser, err)
		}
	}
	figf("11 RBAC", "kube-reporting's ClusterRole", "%d requests allowed, %d outside it refused (403)", len(allowed), len(denied))

	// The taint component's role adds exactly patch on nodes.
	objs, err := renderDaemonSet(*versionA, componentTaint)
	if err != nil {
		t.Fatal(err)
	}
	var roles []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetName() == taintRole && (o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding") {
			roles = append(roles, o)
		}
	}
	if len(roles) != 2 {
		t.Fatalf("deploy/kube-reporting-taint renders %d of its ClusterRole and binding", len(roles))
	}
	if err := c.Apply(ctx, roles); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, taintRole, metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, taintRole, metav1.DeleteOptions{})
	})
	err = kubecluster.WaitFor(10*time.Second, 100*time.Millisecond, "patch nodes allowed with the taint role", func() (bool, error) {
		_, err := agent.CoreV1().Nodes().Patch(ctx, kubecluster.NodeName, types.MergePatchType, noop, metav1.PatchOptions{})
		return err == nil, err
	})
	if err != nil {
		t.Error(err)
	}
	stillDenied := 0
	for _, d := range denied {
		if d.what == "patch nodes (the taint) without the taint role" {
			continue
		}
		stillDenied++
		if err := d.do(); !apierrors.IsForbidden(err) {
			t.Errorf("with the taint role, %s: %v, want 403 Forbidden", d.what, err)
		}
	}
	figf("11 RBAC", "with kube-reporting-taint's ClusterRole", "patch nodes allowed, %d others still refused", stillDenied)
	agentLogClean(t, ds)
}

// watchOnce ends a watch that was allowed and returns whether it was.
func watchOnce(w watch.Interface, err error) error {
	if err == nil {
		w.Stop()
	}
	return err
}

type request struct {
	what string
	do   func() error
}

// deniedRequests are requests outside the agent's roles: other verbs on
// what it may touch, and what it never touches.
func (c *cluster) deniedRequests(ctx context.Context, agent kubernetes.Interface, node *corev1.Node) []request {
	noop := []byte(`{}`)
	return []request{
		{"patch nodes (the taint) without the taint role", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, kubecluster.NodeName, types.MergePatchType, noop, metav1.PatchOptions{})
			return err
		}},
		{"get a node", func() error {
			_, err := agent.CoreV1().Nodes().Get(ctx, kubecluster.NodeName, metav1.GetOptions{})
			return err
		}},
		{"update nodes/status", func() error {
			_, err := agent.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			return err
		}},
		{"delete a node", func() error {
			return agent.CoreV1().Nodes().Delete(ctx, kubecluster.NodeName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"list pods", func() error {
			_, err := agent.CoreV1().Pods(kubecluster.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a pod", func() error {
			_, err := agent.CoreV1().Pods(kubecluster.Namespace).Create(ctx, kubecluster.PodSpec("rbac-probe", "", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"list secrets", func() error {
			_, err := agent.CoreV1().Secrets(daemonSetNamespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list events", func() error {
			_, err := agent.CoreV1().Events(kubecluster.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete an event", func() error {
			return agent.CoreV1().Events(kubecluster.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}},
		{"get a ResourceSlice", func() error {
			_, err := agent.ResourceV1().ResourceSlices().Get(ctx, "rbac-probe", metav1.GetOptions{})
			return err
		}},
		{"create a ResourceSlice", func() error {
			_, err := agent.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"get a DeviceTaintRule", func() error {
			_, err := agent.ResourceV1().DeviceTaintRules().Get(ctx, "rbac-probe", metav1.GetOptions{})
			return err
		}},
		{"patch a DeviceTaintRule", func() error {
			_, err := agent.ResourceV1().DeviceTaintRules().Patch(ctx, "rbac-probe", types.MergePatchType, noop, metav1.PatchOptions{})
			return err
		}},
		{"list ResourceClaims", func() error {
			_, err := agent.ResourceV1().ResourceClaims(kubecluster.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a DeviceClass", func() error {
			_, err := agent.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"list ClusterRoles", func() error { _, err := agent.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}); return err }},
	}
}

// impersonate returns a client acting as user with the groups the API
// server gives a service account's token.
func (c *cluster) impersonate(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + daemonSetNamespace, "system:authenticated"}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}
