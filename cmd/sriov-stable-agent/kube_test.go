package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/kubereport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// writeKubeconfig writes a kubeconfig for a server at url.
func writeKubeconfig(t *testing.T, url string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: url}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKubeFlags(t *testing.T) {
	// Whatever the environment this test runs in (a CI pod, say), no
	// in-cluster configuration and no node name unless a case gives one.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("NODE_NAME", "")
	t.Setenv("FABRIC_PUBLISH", "")
	t.Setenv("FABRIC_TAINT", "")
	state := t.TempDir()
	kubeconfig := writeKubeconfig(t, "https://127.0.0.1:1")
	for _, tc := range []struct {
		args   []string
		output string
	}{
		{[]string{"--taint-on-error"}, "--taint-on-error needs --kubeconfig or --in-cluster"},
		{[]string{"--fabric-publish"}, "--fabric-publish needs --kubeconfig or --in-cluster"},
		{[]string{"--fabric-taint"}, "--fabric-taint needs --fabric-publish and --kubeconfig or --in-cluster"},
		{[]string{"--kubeconfig", kubeconfig, "--fabric-taint"}, "--fabric-taint needs --fabric-publish: the taints follow the verdicts it mirrors"},
		{[]string{"--kubeconfig", filepath.Join(state, "none")}, "--kubeconfig: stat " + filepath.Join(state, "none")},
		{[]string{"--kubeconfig", kubeconfig, "--in-cluster"}, "--kubeconfig and --in-cluster exclude each other"},
		{[]string{"--in-cluster"}, "--in-cluster: unable to load in-cluster configuration"},
		{[]string{"--kubeconfig", kubeconfig}, "needs the node's name: --node-name, or NODE_NAME"},
	} {
		args := append([]string{"monitor", "--state-dir", state, "--listen", "127.0.0.1:0"}, tc.args...)
		code, out, errOut := runAgent(context.Background(), args...)
		if code != 2 || !strings.Contains(errOut, tc.output) || out != "" {
			t.Errorf("sriov-stable-agent %v: exit %d, want 2 with %q on stderr:\n%s%s", args, code, tc.output, out, errOut)
		}
	}
	if code, out, _ := runAgent(context.Background(), "monitor", "--help"); code != 0 || !strings.Contains(out, "-node-name string") ||
		!strings.Contains(out, "default $NODE_NAME") {
		t.Errorf("monitor --help does not show --node-name:\n%s", out)
	}
	// deploy/fabric-publish turns it on by the environment.
	t.Setenv("FABRIC_PUBLISH", "true")
	args := []string{"monitor", "--state-dir", state, "--listen", "127.0.0.1:0"}
	if code, _, errOut := runAgent(context.Background(), args...); code != 2 || !strings.Contains(errOut, "--fabric-publish needs") {
		t.Errorf("sriov-stable-agent %v with FABRIC_PUBLISH=true: exit %d, want 2 asking for the API:\n%s", args, code, errOut)
	}
}

// With Kubernetes reporting on and the API server unreachable, the monitor
// works as without it (sweeps, doctor, metrics), logs the failure once
// however often it retries, and still stops promptly with its context.
func TestMonitorWithUnreachableAPIServer(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	const failed = "cannot update node condition and taint"
	log := runMonitorUntil(t, func(log string) bool {
		_, after, ok := strings.Cut(log, failed)
		return ok && strings.Count(after, `msg="sweep done"`) >= 10
	}, "--state-dir", t.TempDir(), "--sysfs-root", n.Root, "--kmsg=", "--listen", "127.0.0.1:0", "--interval", "50ms",
		"--doctor-interval", "50ms", "--kubeconfig", writeKubeconfig(t, "https://127.0.0.1:1"), "--node-name", "node-a", "--taint-on-error")
	if n := strings.Count(log, failed); n != 1 {
		t.Errorf("the unreachable API server is logged %d times, want once:\n%s", n, log)
	}
	if !strings.Contains(log, "telling Kubernetes") || !strings.Contains(log, "drift monitor stopped") {
		t.Errorf("log:\n%s", log)
	}
}

// renderDeploy renders deploy/daemonset with extra components, as
// kubectl kustomize would (kustomize's own library), and returns every
// rendered document by kind/name and the DaemonSet.
func renderDeploy(t *testing.T, components ...string) (map[string][]byte, *appsv1.DaemonSet) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "deploy"), os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(dir, "deploy", "daemonset", "kustomization.yaml")
	base, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	extra := ""
	for _, c := range components {
		extra += "  - " + c + "\n"
	}
	with := strings.Replace(string(base), "  - ../monitor\n", "  - ../monitor\n"+extra, 1)
	if with == string(base) && extra != "" {
		t.Fatalf("deploy/daemonset/kustomization.yaml does not include the ../monitor component")
	}
	if err := os.WriteFile(k, []byte(with), 0o644); err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "deploy", "daemonset"))
	if err != nil {
		t.Fatalf("kustomize build with %v: %v", components, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]byte{}
	var ds *appsv1.DaemonSet
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		docs[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
		if meta.Kind == "DaemonSet" {
			ds = &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict([]byte(doc), ds); err != nil {
				t.Fatalf("rendered DaemonSet: %v", err)
			}
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	return docs, ds
}

func container(ds *appsv1.DaemonSet, name string) corev1.Container {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}

// The ClusterRoles grant exactly what the agent uses (docs/monitor.md lists
// the same rules with why each is needed); the Kubernetes e2e shows the
// agent works with them and is refused anything else.
var (
	reportingRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"devicetaintrules"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	}
	taintRules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch"}}}
)

const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// By default the DaemonSet has no API access: no role, no token anywhere.
func TestDeployNoAPIAccessByDefault(t *testing.T) {
	docs, ds := renderDeploy(t)
	for key := range docs {
		if strings.HasPrefix(key, "ClusterRole") || strings.HasPrefix(key, "Role") {
			t.Errorf("the default deployment renders %s", key)
		}
	}
	pod := ds.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the default deployment mounts a service account token")
	}
	for _, c := range pod.Containers {
		if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tokenDir }) {
			t.Errorf("container %s mounts a service account token by default", c.Name)
		}
	}
	if mon := container(ds, "monitor"); slices.Contains(mon.Command, "--in-cluster") {
		t.Errorf("the default monitor runs %v", mon.Command)
	}
}

func TestDeployKubeReporting(t *testing.T) {
	for _, tc := range []struct {
		component string
		roles     map[string][]rbacv1.PolicyRule
		taint     bool
	}{
		{"../kube-reporting", map[string][]rbacv1.PolicyRule{"sriov-stable-agent": reportingRules}, false},
		{"../kube-reporting-taint", map[string][]rbacv1.PolicyRule{"sriov-stable-agent": reportingRules, "sriov-stable-agent-taint": taintRules}, true},
	} {
		t.Run(tc.component, func(t *testing.T) {
			docs, ds := renderDeploy(t, tc.component)
			pod := ds.Spec.Template.Spec
			for name, want := range tc.roles {
				var role rbacv1.ClusterRole
				if err := yaml.UnmarshalStrict(docs["ClusterRole/"+name], &role); err != nil {
					t.Fatalf("ClusterRole %s: %v", name, err)
				}
				if diff := cmp.Diff(want, role.Rules); diff != "" {
					t.Errorf("ClusterRole %s rules (-want +got):\n%s", name, diff)
				}
				var binding rbacv1.ClusterRoleBinding
				if err := yaml.UnmarshalStrict(docs["ClusterRoleBinding/"+name], &binding); err != nil {
					t.Fatalf("ClusterRoleBinding %s: %v", name, err)
				}
				sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: pod.ServiceAccountName, Namespace: ds.Namespace}}
				if diff := cmp.Diff(sa, binding.Subjects); diff != "" || binding.RoleRef.Name != name || binding.RoleRef.Kind != "ClusterRole" {
					t.Errorf("ClusterRoleBinding %s binds %+v to %+v, want the DaemonSet's service account (-want +got):\n%s",
						name, binding.RoleRef, binding.Subjects, diff)
				}
			}
			for key := range docs {
				if _, ok := tc.roles[strings.TrimPrefix(strings.TrimPrefix(key, "ClusterRoleBinding/"), "ClusterRole/")]; !ok &&
					strings.Contains(key, "Role") {
					t.Errorf("renders %s, which no test accounts for", key)
				}
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("the pod automounts the token into every container; only the monitor's may have it")
			}
			mon := container(ds, "monitor")
			for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
				mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tokenDir && m.ReadOnly })
				if mounts != (c.Name == "monitor") {
					t.Errorf("container %s mounts the service account token: %v", c.Name, mounts)
				}
			}
			env := slices.IndexFunc(mon.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
			if env < 0 || mon.Env[env].ValueFrom == nil || mon.Env[env].ValueFrom.FieldRef == nil ||
				mon.Env[env].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("monitor env %+v: want NODE_NAME from spec.nodeName", mon.Env)
			}
			if !slices.Contains(mon.Command, "--in-cluster") || slices.Contains(mon.Command, "--taint-on-error") != tc.taint {
				t.Errorf("monitor command %v", mon.Command)
			}
			// The agent accepts the command line (--help stops after parsing it).
			args := slices.Concat(mon.Command[1:], mon.Args, []string{"--help"})
			if code, out, errOut := runAgent(context.Background(), args...); code != 0 {
				t.Errorf("the agent rejects %v:\n%s%s", args, out, errOut)
			}
			tolerated := slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
				return tol.ToleratesTaint(klog.Background(), &corev1.Taint{Key: kubereport.TaintKey, Value: "guid-invalid", Effect: corev1.TaintEffectNoSchedule}, false)
			})
			if tolerated != tc.taint {
				t.Errorf("the DaemonSet tolerates the node taint: %v (tolerations %+v)", tolerated, pod.Tolerations)
			}
			if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == "nvidia.com/gpu" }) {
				t.Errorf("the base's tolerations are gone: %+v", pod.Tolerations)
			}
		})
	}
}

// TestKubernetesAPIOnlyInKubereport keeps the Kubernetes API (clients,
// API types) out of everything but the reporter, the fabric ledger's
// packages (pkg/fabric/...: its API type, client, publisher, controller
// and Lease) and the agent's wiring of them: the agent's sources, the
// doctor and the CNI plugin's packages import none of it. client-go's workqueue and apimachinery's wait (the
// loop helpers), which talk to no API server, are the packages of it the
// sources may use.
func TestKubernetesAPIOnlyInKubereport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/sriov-stable-cni/sriov-stable-cni/"
	allowed := map[string]bool{mod + "pkg/kubereport": true, mod + "cmd/sriov-stable-agent": true}
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(pkg, mod) || strings.HasPrefix(pkg, mod+"pkg/fabric/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == "k8s.io/client-go/util/workqueue" || imp == "k8s.io/apimachinery/pkg/util/wait" {
				continue
			}
			if strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/") {
				seen = seen || allowed[pkg]
				if !allowed[pkg] {
					t.Errorf("%s imports %s; Kubernetes belongs in pkg/kubereport", pkg, imp)
				}
			}
		}
	}
	if !seen {
		t.Fatal("go list shows no Kubernetes import in pkg/kubereport: cannot judge")
	}
}

// TestAgentLinksOnlyTheAPIGroupsItUses keeps client-go's generated
// clientset and its scheme (every API group's types, registered at init)
// out of the agent: they cost 6 MiB of its RSS (docs/performance.md). The
// agent's Kubernetes client knows core/v1 and the three resource.k8s.io
// versions that serve DeviceTaintRules; the fabric controller's Lease
// client knows coordination.k8s.io/v1 (client-go's leaderelection would
// link the whole clientset: package lease says why).
func TestAgentLinksOnlyTheAPIGroupsItUses(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	want := []string{"k8s.io/api/coordination/v1", "k8s.io/api/core/v1", "k8s.io/api/resource/v1", "k8s.io/api/resource/v1alpha3", "k8s.io/api/resource/v1beta2"}
	var groups []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes") {
			t.Errorf("the agent links %s (client-go's generated clients and their scheme of every API group); use kubereport.NewClient", pkg)
		}
		if strings.HasPrefix(pkg, "k8s.io/api/") {
			groups = append(groups, pkg)
		}
	}
	slices.Sort(groups)
	if diff := cmp.Diff(want, groups); diff != "" {
		t.Errorf("API types linked into the agent (-want +got):\n%s", diff)
	}
}
