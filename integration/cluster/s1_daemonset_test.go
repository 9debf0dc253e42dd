//go:build clustere2e

package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
)

const (
	daemonSetNamespace = "sriov-stable-cni"
	daemonSetName      = "sriov-stable-cni"
	installedPlugin    = kubecluster.CNIBinDir + "/sriov-stable-cni"
)

// renderDaemonSet renders deploy/daemonset (with its monitor component) as
// `kubectl apply -k` would, through an overlay that sets the image tag to
// version, and the components of deploy/ named
// (issue 17's reporting: "../kube-reporting").
func renderDaemonSet(version string, components ...string) ([]*unstructured.Unstructured, error) {
	return renderOverlay("../daemonset", version, components...)
}

// renderOverlay renders base (a directory of deploy/, relative to an
// overlay in it) with the e2e's image at version and components.
func renderOverlay(base, version string, components ...string) ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(*workDir, "deploy")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(*repoRoot, "deploy"))); err != nil {
		return nil, err
	}
	overlay := filepath.Join(dir, "e2e")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return nil, err
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/sriov-stable-cni/sriov-stable-cni
    newName: %s
    newTag: %s
`, base, *imageName, version)
	if len(components) > 0 {
		kustomization += "components:\n  - " + strings.Join(components, "\n  - ") + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return nil, err
	}
	return kustomizeBuild(overlay)
}

// kustomizeBuild is kubectl kustomize dir, as objects.
func kustomizeBuild(dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

// deployDaemonSet applies the DaemonSet of a version and waits until its
// pod on the node runs that image and is Ready.
func (c *cluster) deployDaemonSet(ctx context.Context, version string, timeout time.Duration) (*corev1.Pod, error) {
	objs, err := renderDaemonSet(version)
	if err != nil {
		return nil, err
	}
	return c.applyDaemonSet(ctx, objs, version, timeout)
}

// applyDaemonSet applies rendered objects and waits until the DaemonSet's
// pod on the node runs the image of version and is Ready.
func (c *cluster) applyDaemonSet(ctx context.Context, objs []*unstructured.Unstructured, version string, timeout time.Duration) (*corev1.Pod, error) {
	if err := c.Apply(ctx, objs); err != nil {
		return nil, err
	}
	var pod *corev1.Pod
	err := kubecluster.WaitFor(timeout, 250*time.Millisecond, "DaemonSet "+version+" rolled out", func() (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(daemonSetNamespace).Get(ctx, daemonSetName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !rolledOut(ds) {
			return false, fmt.Errorf("status %+v", ds.Status)
		}
		pod, err = c.daemonSetPod(ctx)
		if err != nil {
			return false, err
		}
		if img := pod.Spec.Containers[0].Image; img != imageRef(version) || !kubecluster.PodReady(pod) {
			return false, fmt.Errorf("pod %s runs %s, ready %v", pod.Name, img, kubecluster.PodReady(pod))
		}
		return true, nil
	})
	return pod, err
}

func rolledOut(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled == 1 &&
		s.UpdatedNumberScheduled == 1 && s.NumberReady == 1 && s.NumberAvailable == 1
}

// daemonSetPod is the DaemonSet's one pod (the newest when two exist
// during a rollout).
func (c *cluster) daemonSetPod(ctx context.Context) (*corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(daemonSetNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sriov-stable-cni"})
	if err != nil {
		return nil, err
	}
	var newest *corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = p
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("no pod of DaemonSet %s", daemonSetName)
	}
	return newest, nil
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// installedVersion runs the plugin installed on the node as the DaemonSet's
// liveness probe does and returns the version it reports.
func installedVersion() (string, error) {
	out, err := exec.Command(installedPlugin, "version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s version: %w: %s", installedPlugin, err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(first, "sriov-stable-cni "), nil
}

// scrape fetches the monitor's metrics from the DaemonSet pod.
func scrape(p *corev1.Pod) (promtext.Metrics, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	body, err := kubecluster.HTTPGet(client, "http://"+p.Status.PodIP+":9808/metrics")
	if err != nil {
		return nil, err
	}
	return promtext.Parse(body), nil
}

// TestS1DaemonSet: the installer DaemonSet of deploy/daemonset with the
// project image: its init container puts the binary into the node's CNI bin
// dir and verifies it, the pod becomes Ready, and the monitor container
// serves /metrics.
func TestS1DaemonSet(t *testing.T) {
	c := mustCluster(t)
	ctx := context.Background()
	start := time.Now()
	var pod *corev1.Pod
	var err error
	ran := false
	daemonSetOnce.Do(func() { ran = true; pod, err = c.deployDaemonSet(ctx, *versionA, 120*time.Second) })
	if !ran {
		t.Fatal("the DaemonSet was deployed before scenario 1")
	}
	if err != nil {
		t.Fatal(err)
	}
	figf("1 DaemonSet", "apply to pod Ready (installer done, monitor ready)", "%.1f s", time.Since(start).Seconds())

	want, err := fileSHA256(filepath.Join(*imageDir, "a", "sriov-stable-cni"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := fileSHA256(installedPlugin)
	if err != nil {
		t.Fatalf("the installer left no plugin in the node's CNI bin dir: %v", err)
	}
	if got != want {
		t.Errorf("%s has sha256 %s, the image's binary %s", installedPlugin, got, want)
	}
	st := pod.Status.InitContainerStatuses
	if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Errorf("install init container did not complete: %+v", st)
	}
	log := kubecluster.ContainerLog(pod, "install")
	if !strings.Contains(log, "/host/opt/cni/bin/sriov-stable-cni") || !strings.Contains(log, "sha256 "+want) ||
		!strings.Contains(log, "CNI versions") {
		t.Errorf("the installer's log does not report the verified binary (sha256 %s):\n%s", want, log)
	}
	if v, err := installedVersion(); err != nil || v != *versionA {
		t.Errorf("the installed plugin reports version %q (%v), want %q", v, err, *versionA)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s is not ready: %+v", cs.Name, cs.State)
		}
	}
	m, err := scrape(pod)
	if err != nil {
		t.Fatalf("monitor /metrics: %v", err)
	}
	build := promtext.Series("sriov_stable_agent_build_info", "commit", buildCommit(m), "version", *versionA)
	if !m.Is(build, 1) {
		t.Errorf("the monitor's metrics have no %s:\n%s", build, m.Dump("sriov_stable_agent"))
	}
	t.Logf("monitor serves %d series; installer: %s", len(m), strings.TrimSpace(kubecluster.LastLines(log, 1)))
}

// buildCommit is the commit label of the agent's build info series.
func buildCommit(m promtext.Metrics) string {
	for s := range m {
		if strings.HasPrefix(s, "sriov_stable_agent_build_info{") {
			if _, rest, ok := strings.Cut(s, `commit="`); ok {
				commit, _, _ := strings.Cut(rest, `"`)
				return commit
			}
		}
	}
	return ""
}
