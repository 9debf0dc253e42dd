package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeleteAllPods deletes every DaemonSet and every pod of the cluster and
// waits until no pod is left, so that kubelet tears every sandbox down (CNI
// DEL) while the cluster still runs. The deletion is graceful (one
// second), never forced: kubelet removes a pod once it is torn down.
func (c *Cluster) DeleteAllPods(ctx context.Context) error {
	dss, err := c.Client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ds := range dss.Items {
		if err := c.Client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete the DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
	}
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	grace := int64(1)
	for _, ns := range nss.Items {
		err := c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("delete the pods of %s: %w", ns.Name, err)
		}
	}
	return WaitFor(120*time.Second, 250*time.Millisecond, "every pod gone", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
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

// Teardown stops every component (SIGTERM, then SIGKILL after 20 s, which
// fails it) and judges what is left in the PID namespace: containerd's
// shims and the processes under them (kubelet is stopped: nothing tears
// their pods down any more) are killed and returned; any other process
// fails it, named. It then waits until no process is left, closes the
// node's stand-ins and removes the pods' cgroups (one that keeps tasks
// fails it). The error lists every failure. It runs once; later calls
// return the first result.
func (c *Cluster) Teardown() (Leftovers, error) {
	if c.tornDown {
		return c.leftovers, c.teardownErr
	}
	c.tornDown = true
	if err := inRunStage(); err != nil {
		// Never on the host: the teardown kills every process it can.
		c.teardownErr = fmt.Errorf("teardown: %w", err)
		return c.leftovers, c.teardownErr
	}
	var errs []error
	for _, p := range []*proc{c.kubelet, c.devicePlugin, c.kubeProxy, c.containerd, c.scheduler, c.controllerManager, c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		if err := p.stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	// The init stage reaps them all once killed.
	left := otherProcesses()
	shimExe, _ := filepath.EvalSymlinks(filepath.Join(c.cfg.BinDir, shimBinary))
	leftovers, err := judgeLeftovers(left, shimExe)
	errs = append(errs, err)
	if len(left) > 0 {
		fmt.Fprintf(c.cfg.Progress, "cluster: teardown: killing %d processes left after every component stopped: %s\n", len(left), left)
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	errs = append(errs, WaitFor(15*time.Second, 100*time.Millisecond, "no process left in the PID namespace", func() (bool, error) {
		if l := otherProcesses(); len(l) > 0 {
			return false, fmt.Errorf("left: %s", l)
		}
		return true, nil
	}))
	c.tb.Close()
	errs = append(errs, WaitFor(15*time.Second, 100*time.Millisecond, "cgroups removed", func() (bool, error) {
		err := removeCgroupRoot()
		return err == nil, err
	}))
	c.leftovers, c.teardownErr = leftovers, errors.Join(errs...)
	return c.leftovers, c.teardownErr
}
