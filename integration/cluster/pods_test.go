//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	networksAnnotation      = "k8s.v1.cni.cncf.io/networks"
	networkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	resourceNameAnnotation  = "k8s.v1.cni.cncf.io/resourceName"
)

// podSpec is a test pod: the pause image, attached to the NAD (when not
// empty) with one VF of resource, no service account token (nothing in it
// talks to the API server).
func podSpec(name, nad, res string) *corev1.Pod {
	no, grace := false, int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: map[string]string{"app": "sriov-e2e"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: pauseImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/pause"},
			}},
		},
	}
	if nad != "" {
		p.Annotations = map[string]string{networksAnnotation: nad}
	}
	if res != "" {
		q := resource.MustParse("1")
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceName(res): q},
			Limits:   corev1.ResourceList{corev1.ResourceName(res): q},
		}
	}
	return p
}

func (c *cluster) createPod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// waitRunning watches the pod until it runs with every container ready, and
// fails early when it can no longer start (a failed phase).
func (c *cluster) waitRunning(ctx context.Context, name string, timeout time.Duration) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := c.client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, err
		}
		if len(list.Items) == 1 {
			p := &list.Items[0]
			if podReady(p) {
				return p, nil
			}
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				return p, fmt.Errorf("pod %s ended %s: %s %s", name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
		}
		w, err := c.client.CoreV1().Pods(testNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, err
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if podReady(p) {
				w.Stop()
				return p, nil
			}
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				w.Stop()
				return p, fmt.Errorf("pod %s ended %s: %s %s", name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pod %s not running within %v: %s", name, timeout, c.podTrouble(name))
		}
	}
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podTrouble summarizes why a pod is not running: its phase and its
// warning events.
func (c *cluster) podTrouble(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := c.client.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	msg := "phase " + string(p.Status.Phase)
	for _, e := range c.podEvents(ctx, name, corev1.EventTypeWarning) {
		msg += fmt.Sprintf("; %s: %s", e.Reason, e.Message)
	}
	return msg
}

// podEvents lists a pod's events of a type ("" for all).
func (c *cluster) podEvents(ctx context.Context, name, typ string) []corev1.Event {
	sel := fields.Set{"involvedObject.name": name, "involvedObject.namespace": testNamespace}
	if typ != "" {
		sel["type"] = typ
	}
	list, err := c.client.CoreV1().Events(testNamespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return nil
	}
	return list.Items
}

// deletePods deletes pods at once and waits until they are gone. The
// deletion is graceful (the pods' one second), never forced: kubelet
// removes the object only once it has stopped the containers and the
// sandbox (CNI DEL included), so gone means torn down.
func (c *cluster) deletePods(ctx context.Context, timeout time.Duration, names ...string) error {
	for _, n := range names {
		err := c.client.CoreV1().Pods(testNamespace).Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return waitFor(timeout, 100*time.Millisecond, "pods deleted", func() (bool, error) {
		var left []string
		for _, n := range names {
			_, err := c.client.CoreV1().Pods(testNamespace).Get(ctx, n, metav1.GetOptions{})
			if err == nil {
				left = append(left, n)
			} else if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		if len(left) > 0 {
			return false, fmt.Errorf("still there: %s", strings.Join(left, ", "))
		}
		return true, nil
	})
}

// networkStatus decodes the pod's network-status annotation (written by
// Multus from each network's CNI result).
func networkStatus(p *corev1.Pod) ([]nadv1.NetworkStatus, error) {
	raw, ok := p.Annotations[networkStatusAnnotation]
	if !ok {
		return nil, fmt.Errorf("pod %s has no %s annotation", p.Name, networkStatusAnnotation)
	}
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("pod %s: %s: %w", p.Name, networkStatusAnnotation, err)
	}
	return st, nil
}

// podNetns finds the pod's network namespace among the runtime's (under
// /run/netns) as the one whose eth0 holds the pod IP kubelet reported: the
// runtime's view, independent of what the plugin recorded.
func (c *cluster) podNetns(p *corev1.Pod) (string, error) {
	ip := net.ParseIP(p.Status.PodIP)
	if ip == nil {
		return "", fmt.Errorf("pod %s has no pod IP", p.Name)
	}
	paths := c.node.podNetnsPaths()
	var found []string
	for _, path := range paths {
		_ = ns.WithNetNSPath(path, func(ns.NetNS) error {
			l, err := netlinksafe.LinkByName("eth0")
			if err != nil {
				return nil
			}
			addrs, _ := netlinksafe.AddrList(l, netlink.FAMILY_V4)
			for _, a := range addrs {
				if a.IP.Equal(ip) {
					found = append(found, path)
				}
			}
			return nil
		})
	}
	if len(found) != 1 {
		return "", fmt.Errorf("pod %s (IP %s): %d network namespaces hold its IP: %v", p.Name, ip, len(found), found)
	}
	return found[0], nil
}

// linkIn returns a link of a netns by name (nil when absent).
func linkIn(netnsPath, name string) (netlink.Link, error) {
	var link netlink.Link
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		link = l
		return err
	})
	return link, err
}

// renameIn renames a link inside a netns, as a udev rule or a user in the
// pod would (down, rename, up).
func renameIn(netnsPath, from, to string) error {
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(from)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, to); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
}

// mustCluster returns the cluster, failing the test when it is not up.
func mustCluster(t *testing.T) *cluster {
	t.Helper()
	if theCluster == nil || theCluster.tornDown {
		t.Fatal("the cluster is not up")
	}
	return theCluster
}

// readFile returns a file's content or the error text.
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
