package pluginconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// fabricKinds are the kinds deploy/fabric and deploy/fabric-publish hold
// besides the CRD (pkg/fabric/v1alpha1 checks that against the Go type).
var fabricKinds = map[string]func() any{
	"ServiceAccount":                   func() any { return &corev1.ServiceAccount{} },
	"ClusterRole":                      func() any { return &rbacv1.ClusterRole{} },
	"ClusterRoleBinding":               func() any { return &rbacv1.ClusterRoleBinding{} },
	"Role":                             func() any { return &rbacv1.Role{} },
	"RoleBinding":                      func() any { return &rbacv1.RoleBinding{} },
	"Deployment":                       func() any { return &appsv1.Deployment{} },
	"DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
	"ValidatingAdmissionPolicy":        func() any { return &admissionv1.ValidatingAdmissionPolicy{} },
	"ValidatingAdmissionPolicyBinding": func() any { return &admissionv1.ValidatingAdmissionPolicyBinding{} },
}

// decodeAll decodes every document of a manifest strictly, by kind.
func decodeAll(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		mk, ok := fabricKinds[tm.Kind]
		if !ok {
			t.Fatalf("%s: kind %q has no Go type in this test", path, tm.Kind)
		}
		obj := mk()
		if err := strictDecode([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %s: %v", path, tm.Kind, err)
		}
		out[tm.Kind+"/"+obj.(metav1.Object).GetName()] = obj
	}
	return out
}

// rules flattens a role's rules to "group resource verb" lines.
func rules(rs []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rs {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+" "+res+" "+v)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The controller's Deployment runs two hardened replicas that know their
// Lease's namespace and their own name, and its roles grant what the
// controller and its Lease use and nothing else; the agent's role adds
// NodeVFSets without their status; the policy binds by Deny.
func TestFabricManifests(t *testing.T) {
	ctl := decodeAll(t, filepath.Join("..", "deploy", "fabric", "controller.yaml"))
	d, ok := ctl["Deployment/sriov-stable-fabric"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment sriov-stable-fabric")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "sriov-stable-fabric" || len(pod.Containers) != 1 {
		t.Fatalf("pod: service account %q, %d containers", pod.ServiceAccountName, len(pod.Containers))
	}
	c := pod.Containers[0]
	checkHardened(t, c)
	if !slices.Equal(c.Command, []string{"/usr/bin/sriov-stable-agent", "fabric", "--in-cluster"}) {
		t.Errorf("command %q", c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("env %v: want POD_NAMESPACE and POD_NAME from the downward API", env)
	}
	want := map[string][]string{
		"ClusterRole/sriov-stable-fabric": {" events create", " events patch", "sriov-stable-cni.io nodevfsets list",
			"sriov-stable-cni.io nodevfsets watch", "sriov-stable-cni.io nodevfsets/status patch"},
		"Role/sriov-stable-fabric": {"coordination.k8s.io leases create", "coordination.k8s.io leases get", "coordination.k8s.io leases update"},
	}
	for key, w := range want {
		var got []string
		switch r := ctl[key].(type) {
		case *rbacv1.ClusterRole:
			got = rules(r.Rules)
		case *rbacv1.Role:
			got = rules(r.Rules)
		default:
			t.Fatalf("no %s", key)
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s grants %q, want %q", key, got, w)
		}
	}

	pub := decodeAll(t, filepath.Join("..", "deploy", "fabric-publish", "rbac.yaml"))
	role, ok := pub["ClusterRole/sriov-stable-agent-fabric"].(*rbacv1.ClusterRole)
	if !ok {
		t.Fatal("no ClusterRole sriov-stable-agent-fabric")
	}
	if got, w := rules(role.Rules), []string{"sriov-stable-cni.io nodevfsets create", "sriov-stable-cni.io nodevfsets get",
		"sriov-stable-cni.io nodevfsets list", "sriov-stable-cni.io nodevfsets patch", "sriov-stable-cni.io nodevfsets watch"}; !slices.Equal(got, w) {
		t.Errorf("the agent's fabric role grants %q, want %q", got, w)
	}
	policy := decodeAll(t, filepath.Join("..", "deploy", "fabric-publish", "policy.yaml"))
	b, ok := policy["ValidatingAdmissionPolicyBinding/sriov-stable-nodevfset-own-node"].(*admissionv1.ValidatingAdmissionPolicyBinding)
	if !ok || b.Spec.PolicyName != "sriov-stable-nodevfset-own-node" || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("policy binding %+v: want the policy, Deny", b)
	}
	p, ok := policy["ValidatingAdmissionPolicy/sriov-stable-nodevfset-own-node"].(*admissionv1.ValidatingAdmissionPolicy)
	if !ok || p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("policy %+v: want failurePolicy Fail", p)
	}
	patch := decodeAll(t, filepath.Join("..", "deploy", "fabric-publish", "daemonset-patch.yaml"))
	ds := patch["DaemonSet/sriov-stable-cni"].(*appsv1.DaemonSet)
	if cs := ds.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Name != "monitor" ||
		!slices.Contains(cs[0].Env, corev1.EnvVar{Name: "FABRIC_PUBLISH", Value: "true"}) || len(cs[0].Args) > 0 || len(cs[0].Command) > 0 {
		t.Errorf("the DaemonSet patch %+v: want FABRIC_PUBLISH=true on the monitor, its command and args left alone", cs)
	}
	taint := decodeAll(t, filepath.Join("..", "deploy", "fabric-taint", "daemonset-patch.yaml"))
	ds = taint["DaemonSet/sriov-stable-cni"].(*appsv1.DaemonSet)
	if cs := ds.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Name != "monitor" ||
		!slices.Equal(cs[0].Env, []corev1.EnvVar{{Name: "FABRIC_TAINT", Value: "true"}}) || len(cs[0].Args) > 0 || len(cs[0].Command) > 0 {
		t.Errorf("deploy/fabric-taint's DaemonSet patch %+v: want FABRIC_TAINT=true alone on the monitor", cs)
	}
}
