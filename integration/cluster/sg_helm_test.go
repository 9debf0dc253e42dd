//go:build clustere2e

package cluster

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

var helmBin = flag.String("cluster.helm", "", "the helm CLI (make helm-tool) for scenario 16 (required)")

// dsPods selects the DaemonSet's pods (the namespace may still hold
// scenario 14's fabric controller, going).
var dsPods = metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + daemonSetName}

const (
	helmRelease = "sst"
	chartPath   = "deploy/helm/sriov-stable-cni"
)

// helm runs the helm CLI against the cluster as its admin, with Helm's own
// directories in the run's work dir.
func (c *cluster) helm(args ...string) (string, error) {
	if *helmBin == "" {
		return "", fmt.Errorf("-cluster.helm is not set (integration/cluster/run.sh passes it)")
	}
	home := filepath.Join(*workDir, "helm")
	cmd := exec.Command(*helmBin, append(args, "--kubeconfig", c.PKI.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out), nil
}

// TestSGHelmChart (scenario 16): the chart as an operator uses it. Every
// object it renders with its options on is accepted by the API server
// (kubectl apply --server-side --dry-run=server); helm install puts the
// DaemonSet up at version A with reporting on; helm upgrade with changed
// values rolls it to version B with them; helm uninstall leaves none of the
// release's objects. It replaces the kustomize-deployed DaemonSet of the
// scenarios before it, so it runs last (Go runs a package's tests in file
// order).
func TestSGHelmChart(t *testing.T) {
	c := mustCluster(t)
	ctx := context.Background()
	chart := filepath.Join(*repoRoot, chartPath)
	image := []string{"--set", "image.repository=" + *imageName}

	// The namespace as an operator makes it for the chart (docs/helm.md):
	// deploy/daemonset's, which scenarios before this one applied already.
	base, err := renderDaemonSet(*versionA)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range base {
		if o.GetKind() == "Namespace" {
			if err := c.Apply(ctx, []*unstructured.Unstructured{o}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Deployed through kustomize by the scenarios before, the objects would
	// meet their field manager in the dry run: remove them first.
	c.removeKustomizeDaemonSet(t)

	// Server-side dry-run of everything but the ServiceMonitor, whose CRD
	// (the Prometheus Operator's) this cluster does not serve.
	all, err := c.helm(append([]string{"template", helmRelease, chart, "--namespace", daemonSetNamespace,
		"--set", "agent.kubeReporting.enabled=true", "--set", "agent.kubeReporting.taintOnError=true",
		"--set", "agent.fabric.publish=true", "--set", "agent.fabric.taint=true",
		"--set", "fabricController.enabled=true", "--set", "nodeProblemDetector.config=true"}, image...)...)
	if err != nil {
		t.Fatal(err)
	}
	rendered := filepath.Join(*workDir, "chart-all.yaml")
	if err := os.WriteFile(rendered, []byte(all), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := c.Kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", rendered)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Count(all, "\nkind: ")
	if n := strings.Count(out, "(server dry run)"); n != docs || docs < 15 {
		t.Fatalf("server dry run accepted %d objects of %d rendered, want all (at least 15):\n%s", n, docs, out)
	}
	t.Logf("server-side dry run: all %d objects of the chart accepted", docs)

	start := time.Now()
	if _, err := c.helm(append([]string{"install", helmRelease, chart, "--namespace", daemonSetNamespace,
		"--set", "image.tag=" + *versionA, "--set", "agent.kubeReporting.enabled=true",
		"--wait", "--timeout", "180s"}, image...)...); err != nil {
		t.Fatal(err)
	}
	pod := c.chartPod(t, *versionA, "--interval=30s")
	t.Logf("helm install: %s runs %s, Ready, %s after install", pod, *versionA, time.Since(start).Round(time.Millisecond))
	if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, "sriov-stable-agent", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubeReporting's ClusterRole after install: %v", err)
	}

	start = time.Now()
	if _, err := c.helm(append([]string{"upgrade", helmRelease, chart, "--namespace", daemonSetNamespace,
		"--set", "image.tag=" + *versionB, "--set", "agent.kubeReporting.enabled=true",
		"--set", "agent.kubeReporting.taintOnError=true", "--set", "agent.interval=20s",
		"--wait", "--timeout", "180s"}, image...)...); err != nil {
		t.Fatal(err)
	}
	pod = c.chartPod(t, *versionB, "--interval=20s")
	t.Logf("helm upgrade: %s runs %s with --interval=20s, Ready, %s after upgrade", pod, *versionB, time.Since(start).Round(time.Millisecond))
	if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, taintRole, metav1.GetOptions{}); err != nil {
		t.Fatalf("taintOnError's ClusterRole after upgrade: %v", err)
	}
	hist, err := c.helm("history", helmRelease, "--namespace", daemonSetNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hist, "superseded") || !strings.Contains(hist, "deployed") {
		t.Fatalf("helm history after the upgrade:\n%s", hist)
	}

	start = time.Now()
	if _, err := c.helm("uninstall", helmRelease, "--namespace", daemonSetNamespace, "--wait", "--timeout", "120s"); err != nil {
		t.Fatal(err)
	}
	if err := kubecluster.WaitFor(60*time.Second, 250*time.Millisecond, "nothing of the release left", func() (bool, error) {
		left := c.releaseLeftovers(ctx)
		return len(left) == 0, fmt.Errorf("left: %v", left)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall: no object of the release and no DaemonSet pod left, %s after uninstall", time.Since(start).Round(time.Millisecond))
}

// chartPod waits until the chart's DaemonSet pod runs version with the
// monitor argument arg and is Ready, and returns its name.
func (c *cluster) chartPod(t *testing.T, version, arg string) string {
	t.Helper()
	var name string
	err := kubecluster.WaitFor(120*time.Second, 250*time.Millisecond, "chart's pod at "+version, func() (bool, error) {
		pod, err := c.daemonSetPod(context.Background())
		if err != nil {
			return false, err
		}
		name = pod.Name
		for _, ctr := range pod.Spec.Containers {
			if ctr.Image != imageRef(version) {
				return false, fmt.Errorf("%s runs %s", ctr.Name, ctr.Image)
			}
			if ctr.Name == "monitor" && !slices.Contains(ctr.Args, arg) {
				return false, fmt.Errorf("monitor args %v", ctr.Args)
			}
		}
		if pod.Labels["app.kubernetes.io/name"] != daemonSetName || !kubecluster.PodReady(pod) {
			return false, fmt.Errorf("pod %s not ready", pod.Name)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// removeKustomizeDaemonSet deletes what the scenarios before applied from
// deploy/ (every component's objects but the Namespace), so that Helm owns
// what it installs, and waits for the DaemonSet's pod to go.
func (c *cluster) removeKustomizeDaemonSet(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs, err := renderDaemonSet(*versionA, componentTaint, "../fabric-publish", "../fabric-taint")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		if _, err := c.Kubectl("delete", "--ignore-not-found", "--wait=true", o.GetKind()+"/"+o.GetName(), "-n", daemonSetNamespace); err != nil {
			t.Fatal(err)
		}
	}
	reportingNow = ""
	if err := kubecluster.WaitFor(120*time.Second, 250*time.Millisecond, "kustomize DaemonSet's pods gone", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(daemonSetNamespace).List(ctx, dsPods)
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	}); err != nil {
		t.Fatal(err)
	}
}

// releaseLeftovers names what is left of the release: its objects, Helm's
// release records (Secrets of type helm.sh/release.v1) and the DaemonSet's
// pods.
func (c *cluster) releaseLeftovers(ctx context.Context) []string {
	var left []string
	check := func(what string, get func() error) {
		if err := get(); err == nil {
			left = append(left, what)
		} else if !apierrors.IsNotFound(err) {
			left = append(left, what+": "+err.Error())
		}
	}
	ns := daemonSetNamespace
	check("DaemonSet", func() error {
		_, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, daemonSetName, metav1.GetOptions{})
		return err
	})
	check("ServiceAccount", func() error {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, daemonSetName, metav1.GetOptions{})
		return err
	})
	check("Service", func() error {
		_, err := c.Client.CoreV1().Services(ns).Get(ctx, "sriov-stable-monitor", metav1.GetOptions{})
		return err
	})
	for _, role := range []string{"sriov-stable-agent", taintRole} {
		check("ClusterRole "+role, func() error {
			_, err := c.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
			return err
		})
		check("ClusterRoleBinding "+role, func() error {
			_, err := c.Client.RbacV1().ClusterRoleBindings().Get(ctx, role, metav1.GetOptions{})
			return err
		})
	}
	secrets, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=helm.sh/release.v1"})
	if err != nil {
		left = append(left, "secrets: "+err.Error())
	} else {
		for _, s := range secrets.Items {
			left = append(left, "release Secret "+s.Name)
		}
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, dsPods)
	if err != nil {
		left = append(left, "pods: "+err.Error())
	} else {
		for _, p := range pods.Items {
			left = append(left, "Pod "+p.Name)
		}
	}
	return left
}
