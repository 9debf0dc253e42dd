package pluginconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

const daemonsetDir = "../deploy/daemonset"

// kustomization is the subset of kustomize's schema the DaemonSet uses;
// strict decoding makes a new field an explicit change here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	// Components are checked where they live (deploy/monitor: the agent's
	// tests decode its patch and Service strictly).
	Components []string `json:"components"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
}

// kinds maps each kind the DaemonSet directory may hold to its API version
// and Go type. A resource of another kind fails the test until it is added.
var kinds = map[string]struct {
	apiVersion string
	new        func() metav1.Object
}{
	"Namespace":      {"v1", func() metav1.Object { return &corev1.Namespace{} }},
	"ServiceAccount": {"v1", func() metav1.Object { return &corev1.ServiceAccount{} }},
	"Service":        {"v1", func() metav1.Object { return &corev1.Service{} }},
	"ConfigMap":      {"v1", func() metav1.Object { return &corev1.ConfigMap{} }},
	"DaemonSet":      {"apps/v1", func() metav1.Object { return &appsv1.DaemonSet{} }},
}

type manifests struct {
	k       kustomization
	objects map[string]metav1.Object // by kind/name
	ds      *appsv1.DaemonSet
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	var m manifests
	mustDecode(t, filepath.Join(daemonsetDir, "kustomization.yaml"), &m.k)
	if m.k.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.k.Kind != "Kustomization" {
		t.Fatalf("kustomization apiVersion/kind %s/%s", m.k.APIVersion, m.k.Kind)
	}
	m.objects = map[string]metav1.Object{}
	for _, res := range m.k.Resources {
		path := filepath.Join(daemonsetDir, res)
		data := readDoc(t, path)
		// Peek at the kind leniently; the typed decode below is strict.
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		kind, ok := kinds[tm.Kind]
		if !ok {
			t.Fatalf("%s: kind %q has no Go type in this test; add it to kinds", path, tm.Kind)
		}
		if tm.APIVersion != kind.apiVersion {
			t.Errorf("%s: apiVersion %q, want %q", path, tm.APIVersion, kind.apiVersion)
		}
		obj := kind.new()
		mustDecode(t, path, obj)
		m.objects[tm.Kind+"/"+obj.GetName()] = obj
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			if m.ds != nil {
				t.Fatalf("%s: a second DaemonSet; this test expects one", path)
			}
			m.ds = ds
		}
	}
	if m.ds == nil {
		t.Fatal("no DaemonSet among the kustomization's resources")
	}
	return m
}

func TestKustomization(t *testing.T) {
	m := loadManifests(t)

	ents, err := os.ReadDir(daemonsetDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".yaml") && n != "kustomization.yaml" && !slices.Contains(m.k.Resources, n) {
			t.Errorf("%s is not listed in kustomization.yaml resources", n)
		}
	}

	if _, ok := m.objects["Namespace/"+m.k.Namespace]; !ok {
		t.Errorf("kustomization namespace %q is not created by any resource", m.k.Namespace)
	}
	for key, obj := range m.objects {
		if ns := obj.GetNamespace(); ns != "" && ns != m.k.Namespace {
			t.Errorf("%s is in namespace %q, kustomization says %q", key, ns, m.k.Namespace)
		}
	}
	if ns, ok := m.objects["Namespace/"+m.k.Namespace]; ok && ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Error("the namespace's Pod Security level forbids the hostPath volume the installer needs")
	}

	if len(m.k.Images) != 1 {
		t.Fatalf("%d images in kustomization.yaml, want exactly one", len(m.k.Images))
	}
	img := m.k.Images[0]
	ref := img.NewName + ":" + img.NewTag
	if img.Digest != "" {
		ref = img.NewName + "@" + img.Digest
	}
	if _, err := name.ParseReference(ref, name.StrictValidation); err != nil {
		t.Errorf("image %q: %v", ref, err)
	}
	spec := m.ds.Spec.Template.Spec
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Image != img.Name {
			t.Errorf("container %s uses image %q; use the kustomization's name %q so the reference stays in one place", c.Name, c.Image, img.Name)
		}
	}
	for _, e := range ents {
		if e.Name() == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(daemonsetDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), img.NewName) {
			t.Errorf("%s repeats the image reference %s; it belongs in kustomization.yaml only", e.Name(), img.NewName)
		}
	}
}

// installArgs returns the flags of a container that runs the installer, or
// ok=false for any other container.
func installArgs(c corev1.Container) (args []string, ok bool) {
	cmd := slices.Concat(c.Command, c.Args)
	if len(cmd) < 2 || cmd[0] != "/usr/bin/sriov-stable-cni" || cmd[1] != "install" {
		return nil, false
	}
	return cmd[2:], true
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func TestDaemonSetPod(t *testing.T) {
	m := loadManifests(t)
	ds := m.ds
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("update strategy %q", ds.Spec.UpdateStrategy.Type)
	}
	pod := ds.Spec.Template.Spec
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v: the installer needs none", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("a service account token is mounted; the installer never calls the API server")
	}
	if _, ok := m.objects["ServiceAccount/"+pod.ServiceAccountName]; !ok {
		t.Errorf("serviceAccountName %q is not created by the kustomization", pod.ServiceAccountName)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q: pods on the node cannot attach SR-IOV networks without the plugin", pod.PriorityClassName)
	}
	if pod.NodeSelector["feature.node.kubernetes.io/network-sriov.capable"] != "true" {
		t.Errorf("nodeSelector %v does not pick SR-IOV nodes", pod.NodeSelector)
	}
	for _, effect := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute} {
		taint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: effect}
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
			return tol.ToleratesTaint(klog.Background(), &taint, false)
		}) {
			t.Errorf("GPU nodes' taint %s is not tolerated", taint.ToString())
		}
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil ||
		pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
}

func TestDaemonSetContainers(t *testing.T) {
	m := loadManifests(t)
	pod := m.ds.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	var initInstall, waitInstall int
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		t.Run(c.Name, func(t *testing.T) {
			checkHardened(t, c)
			args, ok := installArgs(c)
			if !ok {
				return
			}
			if slices.ContainsFunc(pod.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name }) {
				if slices.Contains(args, "--wait") {
					t.Error("an init container with --wait never finishes")
				}
				initInstall++
			} else if slices.Contains(args, "--wait") {
				waitInstall++
			}
			// That the binary accepts these flags is its own test's job
			// (cmd/sriov-stable-cni: TestDeployCommandLines).
			if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
				t.Errorf("adds capabilities %v; copying a file needs none", sc.Capabilities.Add)
			}
			if len(c.VolumeMounts) != 1 {
				t.Fatalf("%d volume mounts; the installer gets the CNI bin dir only", len(c.VolumeMounts))
			}
			vm := c.VolumeMounts[0]
			v := volumes[vm.Name]
			if v.HostPath == nil || v.HostPath.Path != "/opt/cni/bin" {
				t.Fatalf("mounts volume %q (%+v), want the hostPath /opt/cni/bin", vm.Name, v.VolumeSource)
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
				t.Error("hostPath type is not Directory: a wrong path would silently create an unused directory")
			}
			if vm.ReadOnly {
				t.Error("the CNI bin dir is mounted read-only")
			}
			if dir := flagValue(args, "--cni-bin-dir"); dir != vm.MountPath {
				t.Errorf("--cni-bin-dir %q, but the host dir is mounted at %q", dir, vm.MountPath)
			}
			if p := c.LivenessProbe; p != nil && p.Exec != nil && !strings.HasPrefix(p.Exec.Command[0], vm.MountPath+"/") {
				t.Errorf("liveness probe runs %q, not the installed copy under %s", p.Exec.Command[0], vm.MountPath)
			}
		})
	}
	if initInstall == 0 {
		t.Error("no init container installs the plugin before the pod starts")
	}
	if waitInstall == 0 {
		t.Error("no container keeps the pod up with install --wait")
	}
}

// checkHardened holds for every container of the DaemonSet, the installer's
// and any added later: never privileged, read-only root, no privilege
// escalation, all capabilities dropped (a container that needs some adds
// them back by name), requests and limits set.
func checkHardened(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("capabilities are not dropped (drop: [ALL])")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[r]
		lim, hasLim := c.Resources.Limits[r]
		if !hasReq || !hasLim {
			t.Errorf("%s request or limit missing", r)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s request %s above limit %s", r, req.String(), lim.String())
		}
	}
	if c.ImagePullPolicy == corev1.PullAlways {
		t.Error("imagePullPolicy Always: a registry outage would keep the node's installer down")
	}
}
