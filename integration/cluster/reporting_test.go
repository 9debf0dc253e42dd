//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// Issue 17's scenarios (s8 to sb): the monitor tells Kubernetes, deployed
// with deploy/kube-reporting (or deploy/kube-reporting-taint) as an
// operator would add it. Their files are named s8, s9, sa, sb so that they
// run after scenarios 1 to 7 (go test runs files in lexical order, where
// s10 would come before s2).

// The e2e's settings of the reporting monitor, applied to the rendered
// DaemonSet:
//   - this cluster has no kube-proxy, so the kubernetes Service's ClusterIP
//     that in-cluster configuration dials is not routed: the monitor is
//     pointed at the API server's address instead (what kube-proxy would
//     have translated it to);
//   - sweeps and doctor runs every reportInterval instead of 30 s and 5 min.
const reportInterval = 2 * time.Second

const (
	componentReporting = "../kube-reporting"
	componentTaint     = "../kube-reporting-taint"
	taintRole          = "sriov-stable-agent-taint" // the ClusterRole and binding of componentTaint
	taintKey           = "sriov-stable-cni.io/vf-unhealthy"
	conditionType      = "SRIOVVFsHealthy"
	agentUser          = "system:serviceaccount:" + daemonSetNamespace + ":" + daemonSetName
)

// reportingNow is the component the DaemonSet runs with ("" before any).
var reportingNow string

// ensureReporting deploys the DaemonSet (at the version it runs) with a
// reporting component unless it already runs with it, and waits for its pod.
// Leaving the taint component removes its ClusterRole and binding, as
// kubectl apply --prune would.
func (c *cluster) ensureReporting(t *testing.T, component string) *corev1.Pod {
	t.Helper()
	c.ensureDaemonSet(t)
	ctx := context.Background()
	if reportingNow == component {
		p, err := c.daemonSetPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ds, err := c.client.AppsV1().DaemonSets(daemonSetNamespace).Get(ctx, daemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(ds.Spec.Template.Spec.Containers[0].Image, *imageName+":")
	objs, err := renderDaemonSet(version, component)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2eReporting(objs); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pod, err := c.applyDaemonSet(ctx, objs, version, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if component != componentTaint {
		for _, del := range []func() error{
			func() error {
				return c.client.RbacV1().ClusterRoleBindings().Delete(ctx, taintRole, metav1.DeleteOptions{})
			},
			func() error { return c.client.RbacV1().ClusterRoles().Delete(ctx, taintRole, metav1.DeleteOptions{}) },
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	reportingNow = component
	figf("reporting", "DaemonSet with "+filepath.Base(component)+" rolled out", "%.1f s", time.Since(start).Seconds())
	return pod
}

// e2eReporting adapts the rendered DaemonSet's monitor to this cluster (see
// reportInterval).
func e2eReporting(objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
			return err
		}
		cs := ds.Spec.Template.Spec.Containers
		i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == "monitor" })
		if i < 0 {
			return fmt.Errorf("the rendered DaemonSet has no monitor container")
		}
		cs[i].Env = append(cs[i].Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: nodeIP},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"})
		for j, a := range cs[i].Args {
			switch {
			case strings.HasPrefix(a, "--interval="):
				cs[i].Args[j] = "--interval=" + reportInterval.String()
			case strings.HasPrefix(a, "--doctor-interval="):
				cs[i].Args[j] = "--doctor-interval=" + reportInterval.String()
			}
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds)
		if err != nil {
			return err
		}
		o.Object = m
	}
	return nil
}

// kubectl runs the real kubectl (built by build.sh at the cluster's
// version) as the cluster's admin and returns its output, for the figures
// an operator would see.
func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(*binDir, "kubectl"), append([]string{"--kubeconfig", c.pki.Kubeconfig,
		"--cache-dir", filepath.Join(runDir, "kubectl-cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// showKubectl prints what kubectl shows, framed, for docs/monitor.md.
func (c *cluster) showKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out := c.kubectl(t, args...)
	t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	return out
}

// setGUID writes a VF's node and port GUID into the fixture, as the kernel
// shows them once the firmware holds them.
func (n *node) setGUID(vf sysfstest.DGXVF, guid string) {
	n.dgx.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: guid, FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(guid)}}})
}

// setPortDown writes a VF's port as administratively disabled (or, with
// down false, ACTIVE/LinkUp again), keeping its GUID.
func (n *node) setPortDown(vf sysfstest.DGXVF, down bool) {
	p := sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)}
	if down {
		p.State, p.PhysState = "1: DOWN", "3: Disabled"
	}
	n.dgx.SetPort(vf.PCI, vf.RDMA, 1, p)
}

// nodeCondition returns the node's condition of a type (nil without one).
func (c *cluster) nodeCondition(ctx context.Context, typ string) (*corev1.NodeCondition, *corev1.Node, error) {
	n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
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

// nodeTaint returns the node's taint of a key (nil without one).
func nodeTaint(n *corev1.Node, key string) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == key {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// eventsOf lists the events about an object of the test namespace (or,
// with kind Node, about the node) with a reason, oldest first.
func (c *cluster) eventsOf(ctx context.Context, kind, name, reason string) ([]corev1.Event, error) {
	ns := testNamespace
	if kind == "Node" {
		ns = metav1.NamespaceDefault
	}
	sel := "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=" + reason
	list, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return list.Items, nil
}

// agentLogClean checks the monitor's log of the DaemonSet pod for API
// errors: the ClusterRole must let it do all it does.
func agentLogClean(t *testing.T, p *corev1.Pod) {
	t.Helper()
	log := containerLog(p, "monitor")
	for _, bad := range []string{"forbidden", "Forbidden", "cannot update"} {
		if strings.Contains(log, bad) {
			t.Errorf("the monitor's log has %q:\n%s", bad, lastLines(log, 30))
			return
		}
	}
}

// vfByPCI is the fixture's VF at a PCI address.
func (n *node) vfByPCI(pci string) sysfstest.DGXVF {
	for _, vf := range n.vfs {
		if vf.PCI == pci {
			return vf
		}
	}
	return sysfstest.DGXVF{}
}
