//go:build clustere2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestZTeardown runs last (files and tests run in order): it deletes every
// pod, checks the node is as it was (every VF home, no record), stops the
// cluster and checks that no process of it is left, and removes its cgroups.
// The host side (no mount, namespace or process left) is checked by the
// test binary on the host once the namespaces are gone.
func TestZTeardown(t *testing.T) {
	c := theCluster
	start := time.Now()
	if err := c.deleteAllPods(); err != nil {
		t.Error(err)
	}
	if missing := c.node.vfsHome(); len(missing) > 0 {
		t.Errorf("VFs not back on the node under their host name after every pod was deleted: %s", strings.Join(missing, ", "))
	}
	if recs := records(t); len(recs) > 0 {
		t.Errorf("%d attachment records left after every pod was deleted: %v", len(recs), recs)
	}
	if err := c.teardown(); err != nil {
		t.Error(err)
	}
	// Every pod was torn down by kubelet (a pod whose sandbox DEL failed
	// would still be there, above). A shim may still outlive containerd:
	// kubelet restarted mid-churn while it started a pod can lose a
	// container it made (containerd logs the sandbox's shim as gone while
	// its process runs on). teardown killed such shims and their
	// containers, and counts them here; any other process that outlived the
	// cluster failed teardown. The host check after the run proves none is
	// left.
	figf("teardown", "shims outliving containerd (killed)", "%d %s", len(c.shimsLeft), joinProcs(c.shimsLeft))
	figf("teardown", "their containers' processes (killed)", "%d", len(c.shimChildrenLeft))
	figf("teardown", "pods deleted, cluster stopped, cgroups removed", "%.1f s", time.Since(start).Seconds())
}

// deleteAllPods deletes the tests' namespace content and the DaemonSet's
// namespace and waits until no pod is left on the node, so that kubelet
// tears every sandbox down (CNI DEL) while the cluster still runs.
func (c *cluster) deleteAllPods() error {
	ctx := context.Background()
	if c.client == nil {
		return nil
	}
	// Graceful, not forced: kubelet removes a pod once it is torn down.
	grace := int64(1)
	for _, ns := range []string{testNamespace, daemonSetNamespace} {
		err := c.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("delete the pods of %s: %w", ns, err)
		}
	}
	_ = c.client.AppsV1().DaemonSets(daemonSetNamespace).Delete(ctx, daemonSetName, metav1.DeleteOptions{})
	return waitFor(120*time.Second, 250*time.Millisecond, "every pod gone", func() (bool, error) {
		pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			var names []string
			for _, p := range pods.Items {
				names = append(names, p.Namespace+"/"+p.Name+" "+string(p.Status.Phase))
			}
			return false, fmt.Errorf("%d pods left: %s", len(names), strings.Join(names, ", "))
		}
		return true, nil
	})
}

// teardown stops every component, kills what is left of the pods (their
// shims and containers: kubelet was stopped) and fails on any other process
// left, checks no process is left in the PID namespace and removes the
// pods' cgroups. It runs once; later
// calls return the first result.
func (c *cluster) teardown() error {
	if c.tornDown {
		return c.teardownErr
	}
	c.tornDown = true
	var errs []error
	for _, p := range []*proc{c.kubelet, c.devicePlugin, c.kubeProxy, c.containerd, c.scheduler, c.controllerManager, c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		if err := p.stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	// What may be left are containerd's shims and the containers they run
	// (a shim outlives containerd by design). Anything else is a process
	// the cluster's components should have ended: teardown fails naming it.
	// The init stage reaps them all once killed.
	left := otherProcesses()
	var unknown []process
	c.shimsLeft, c.shimChildrenLeft, unknown = sortLeftovers(left)
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("%d processes outlived the cluster that are neither a shim of its containerd (%s -namespace k8s.io) nor under one: %s",
			len(unknown), shimBinary, joinProcs(unknown)))
	}
	if len(left) > 0 {
		fmt.Printf("cluster: teardown: killing %d processes left after every component stopped: %s\n", len(left), joinProcs(left))
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	err := waitFor(15*time.Second, 100*time.Millisecond, "no process left in the PID namespace", func() (bool, error) {
		if l := otherProcesses(); len(l) > 0 {
			return false, fmt.Errorf("left: %s", joinProcs(l))
		}
		return true, nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	c.tb.Close()
	err = waitFor(15*time.Second, 100*time.Millisecond, "cgroups removed", func() (bool, error) {
		err := removeCgroupRoot()
		return err == nil, err
	})
	if err != nil {
		errs = append(errs, err)
	}
	c.teardownErr = errors.Join(errs...)
	return c.teardownErr
}

// records lists the plugin's attachment records on the node.
func records(t testing.TB) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(stateDir, "attachments", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
