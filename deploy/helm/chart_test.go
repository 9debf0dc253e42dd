// Package chart holds the tests of the Helm chart in sriov-stable-cni/ (make
// test-chart); it has no code of its own.
package chart

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/registry"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The Helm chart (deploy/helm/sriov-stable-cni) and the plain manifests in
// deploy/ describe the same objects. These tests render the chart with the
// helm CLI built from Helm's Go library in tools/helm (make helm-tool; the
// test-chart target passes its path in HELM) and fail when a rendering differs from
// kustomize's build of the matching manifests.

const (
	chartDir       = "sriov-stable-cni"
	deployDir      = "../"
	chartNamespace = "sriov-stable-cni"
)

// helmOnlyLabels are the labels the chart adds for Helm's bookkeeping; the
// plain manifests have no release to name.
var helmOnlyLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"}

// helmBin is the helm CLI under test. Without HELM the test cannot run: it
// skips on a developer machine and fails in CI (CI=1, .ci/run).
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("HELM is not set: run the chart tests through make test-chart, which builds helm (make helm-tool)")
		}
		t.Skip("HELM is not set (make helm-tool builds it; make test-chart sets it)")
	}
	return bin
}

// helmTemplate runs `helm template` on the chart with the --set values given.
func helmTemplate(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "sriov-stable-cni", chartDir, "--namespace", chartNamespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// objects splits a multi-document YAML stream into objects by
// kind/namespace/name, with the Helm-only labels removed.
func objects(t *testing.T, stream []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range splitDocs(stream) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		meta, _ := m["metadata"].(map[string]any)
		if labels, ok := meta["labels"].(map[string]any); ok {
			for _, l := range helmOnlyLabels {
				delete(labels, l)
			}
		}
		if clusterScoped[fmt.Sprint(m["kind"])] {
			// kustomize's namespace setting reaches kinds it does not know
			// as cluster-scoped (ValidatingAdmissionPolicy); the API
			// server ignores it there.
			delete(meta, "namespace")
		}
		sortNamed(m)
		key := fmt.Sprintf("%v/%v/%v", m["kind"], meta["namespace"], meta["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = m
	}
	return objs
}

// clusterScoped are the cluster-scoped kinds the chart renders.
var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "Namespace": true,
}

// namedLists are the lists of a pod spec whose order means nothing to
// Kubernetes (items are found by name) and differs between a strategic merge
// patch, which puts the patch's items first, and the chart's template.
var namedLists = map[string]bool{"containers": true, "initContainers": true, "volumes": true, "volumeMounts": true, "env": true}

// sortNamed sorts every named list in v by name (volume mounts by name and
// mount path), stably.
func sortNamed(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if l, ok := e.([]any); ok && namedLists[k] {
				slices.SortStableFunc(l, func(a, b any) int {
					return strings.Compare(sortKey(a), sortKey(b))
				})
			}
			sortNamed(e)
		}
	case []any:
		for _, e := range x {
			sortNamed(e)
		}
	}
}

func sortKey(v any) string {
	m, _ := v.(map[string]any)
	return fmt.Sprint(m["name"], "\x00", m["mountPath"])
}

func splitDocs(stream []byte) [][]byte {
	var docs [][]byte
	for doc := range strings.SplitSeq(string(stream), "\n---") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// kustomizeObjects builds base (a directory of deploy/) with components added,
// as an overlay would, through a copy of deploy/.
func kustomizeObjects(t *testing.T, base string, components ...string) map[string]map[string]any {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	// The namespace as deploy/'s own kustomizations set it: a component
	// added in deploy/daemonset's list gets it from there.
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + chartNamespace +
		"\nresources:\n  - ../" + base + "\n"
	if len(components) > 0 {
		k += "components:\n  - ../" + strings.Join(components, "\n  - ../") + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build %s + %v: %v", base, components, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, out)
}

// TestChartMatchesManifests renders the chart with the values that stand for
// each combination of deploy/'s components and requires the very objects
// kustomize builds from them, field for field. The one difference allowed:
// the chart creates no Namespace (helm install --namespace … --create-namespace
// does), and it adds Helm's own labels.
func TestChartMatchesManifests(t *testing.T) {
	cases := []struct {
		name       string
		set        []string
		base       string
		components []string
	}{
		{"defaults", nil, "daemonset", nil},
		{"serviceMonitor", []string{"serviceMonitor.enabled=true"}, "daemonset", []string{"monitor/servicemonitor"}},
		{"kubeReporting", []string{"agent.kubeReporting.enabled=true"}, "daemonset", []string{"kube-reporting"}},
		{"taintOnError", []string{"agent.kubeReporting.enabled=true", "agent.kubeReporting.taintOnError=true"},
			"daemonset", []string{"kube-reporting-taint"}},
		{"fabricNode", []string{"agent.kubeReporting.enabled=true", "agent.fabric.publish=true", "agent.fabric.taint=true"},
			"daemonset", []string{"kube-reporting", "fabric-publish", "fabric-taint"}},
		{"fabricController", []string{"installer.enabled=false", "agent.enabled=false", "fabricController.enabled=true"}, "fabric", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			chart := objects(t, out)
			want := kustomizeObjects(t, tc.base, tc.components...)
			delete(want, "Namespace/<nil>/"+chartNamespace) // helm install --create-namespace
			for _, key := range slices.Sorted(maps.Keys(want)) {
				if diff := cmp.Diff(want[key], chart[key]); diff != "" {
					t.Errorf("%s: chart (+) differs from deploy/%s + %v (-):\n%s", key, tc.base, tc.components, diff)
				}
			}
			for _, key := range slices.Sorted(maps.Keys(chart)) {
				if _, ok := want[key]; !ok {
					t.Errorf("%s: rendered by the chart, not in deploy/%s + %v", key, tc.base, tc.components)
				}
			}
		})
	}
}

// TestChartNPDConfig: the ConfigMap the chart renders for node-problem-detector
// holds deploy/node-problem-detector's config byte for byte.
func TestChartNPDConfig(t *testing.T) {
	out, err := helmTemplate(t, "nodeProblemDetector.config=true", "installer.enabled=false", "agent.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	cm, ok := objs["ConfigMap/"+chartNamespace+"/sriov-stable-doctor-npd"]
	if !ok || len(objs) != 1 {
		t.Fatalf("rendered %v, want the ConfigMap sriov-stable-doctor-npd alone", slices.Sorted(maps.Keys(objs)))
	}
	want, err := os.ReadFile(filepath.Join(deployDir, "node-problem-detector", "sriov-stable-doctor.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := cm["data"].(map[string]any)["sriov-stable-doctor.json"]
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(fmt.Sprint(got))); diff != "" {
		t.Errorf("chart's NPD config differs from deploy/node-problem-detector's (-want +got):\n%s", diff)
	}
}

// TestChartValues: what the values operators change do to the objects.
func TestChartValues(t *testing.T) {
	t.Run("cniBinHostPath", func(t *testing.T) {
		ds := renderedDaemonSet(t, "cniBinHostPath=/var/lib/cni/bin")
		if got := field(ds, "spec", "template", "spec", "volumes", 0, "hostPath", "path"); got != "/var/lib/cni/bin" { // cni-bin sorts first
			t.Errorf("cni-bin hostPath %v, want /var/lib/cni/bin", got)
		}
	})
	t.Run("installerOff", func(t *testing.T) {
		ds := renderedDaemonSet(t, "installer.enabled=false")
		spec := field(ds, "spec", "template", "spec").(map[string]any)
		if _, ok := spec["initContainers"]; ok {
			t.Error("installer off still renders the install init container")
		}
		names := containerNames(spec["containers"])
		if !slices.Equal(names, []string{"monitor"}) {
			t.Errorf("containers %v, want [monitor]", names)
		}
		for _, v := range spec["volumes"].([]any) {
			if v.(map[string]any)["name"] == "cni-bin" {
				t.Error("installer off still mounts the CNI bin dir")
			}
		}
	})
	t.Run("repairAddsNetAdmin", func(t *testing.T) {
		ds := renderedDaemonSet(t, "agent.repair=altname\\,name")
		mon := field(ds, "spec", "template", "spec", "containers", 1).(map[string]any) // sorted by name: keep-installed, monitor
		if !slices.Contains(toStrings(mon["args"]), "--repair=altname,name") {
			t.Errorf("monitor args %v lack --repair=altname,name", mon["args"])
		}
		caps := toStrings(field(mon, "securityContext", "capabilities", "add"))
		if mon["name"] != "monitor" || !slices.Equal(caps, []string{"SYS_ADMIN", "NET_ADMIN"}) {
			t.Errorf("capabilities %v, want [SYS_ADMIN NET_ADMIN]", caps)
		}
	})
	t.Run("imageTag", func(t *testing.T) {
		ds := renderedDaemonSet(t, "image.repository=registry.example/sst", "image.tag=v9")
		if got := field(ds, "spec", "template", "spec", "containers", 0, "image"); got != "registry.example/sst:v9" {
			t.Errorf("image %v, want registry.example/sst:v9", got)
		}
	})
}

// TestChartRefusesBadValues: combinations that cannot work fail the render
// with a message naming what is missing, instead of a DaemonSet that crashes.
func TestChartRefusesBadValues(t *testing.T) {
	cases := map[string][]string{
		"agent.fabric.publish needs agent.kubeReporting.enabled":         {"agent.fabric.publish=true"},
		"agent.fabric.taint needs agent.fabric.publish":                  {"agent.kubeReporting.enabled=true", "agent.fabric.taint=true"},
		"agent.kubeReporting.taintOnError needs agent.kubeReporting":     {"agent.kubeReporting.taintOnError=true"},
		"agent.repair host needs the host's network namespace":           {"agent.repair=host"},
		"at '/agent/kubeReporting/deviceTaintEffect': value must be one": {"agent.kubeReporting.enabled=true", "agent.kubeReporting.deviceTaintEffect=Sometimes"},
	}
	for want, set := range cases {
		_, err := helmTemplate(t, set...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %v: error %v, want one saying %q", set, err, want)
		}
	}
}

// TestChartLint runs helm lint --strict on the chart, with the defaults and
// with everything on.
func TestChartLint(t *testing.T) {
	for _, set := range [][]string{nil, {
		"serviceMonitor.enabled=true", "agent.kubeReporting.enabled=true", "agent.kubeReporting.taintOnError=true",
		"agent.fabric.publish=true", "agent.fabric.taint=true", "fabricController.enabled=true", "nodeProblemDetector.config=true",
	}} {
		args := []string{"lint", "--strict", chartDir, "--namespace", chartNamespace}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helmBin(t), args...).CombinedOutput()
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestChartPushOCI does what make chart CHART_REGISTRY=oci://… does, against
// an OCI registry on loopback (go-containerregistry's, in memory): helm
// package, helm push, then helm pull of the pushed version gives the same
// chart back, byte for byte.
func TestChartPushOCI(t *testing.T) {
	helm := helmBin(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	env := append(os.Environ(), "HELM_CACHE_HOME="+dir+"/cache", "HELM_CONFIG_HOME="+dir+"/config", "HELM_DATA_HOME="+dir+"/data")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("package", chartDir, "--destination", dir)
	pkg := filepath.Join(dir, "sriov-stable-cni-0.1.0.tgz")
	out := run("push", pkg, "oci://"+host+"/charts", "--plain-http")
	if !strings.Contains(out, "Digest: sha256:") {
		t.Fatalf("helm push printed no digest:\n%s", out)
	}
	pulled := filepath.Join(dir, "pulled")
	if err := os.Mkdir(pulled, 0o755); err != nil {
		t.Fatal(err)
	}
	run("pull", "oci://"+host+"/charts/sriov-stable-cni", "--version", "0.1.0", "--plain-http", "--destination", pulled)
	want, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(pulled, "sriov-stable-cni-0.1.0.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("pulled chart (%d bytes) differs from the pushed one (%d bytes)", len(got), len(want))
	}
}

func renderedDaemonSet(t *testing.T, set ...string) map[string]any {
	t.Helper()
	out, err := helmTemplate(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := objects(t, out)["DaemonSet/"+chartNamespace+"/sriov-stable-cni"]
	if !ok {
		t.Fatal("no DaemonSet rendered")
	}
	return ds
}

// field walks maps by key and lists by index; nil when a step is missing.
func field(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func containerNames(v any) []string {
	var names []string
	for _, c := range v.([]any) {
		names = append(names, fmt.Sprint(c.(map[string]any)["name"]))
	}
	return names
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	s := make([]string, 0, len(l))
	for _, x := range l {
		s = append(s, fmt.Sprint(x))
	}
	return s
}
