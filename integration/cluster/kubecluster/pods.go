package kubecluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
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

// PodSpec is a test pod in Namespace: the pause image, attached to the NAD
// (when not empty) with one device of res (when not empty), no service
// account token (nothing in it talks to the API server).
func PodSpec(name, nad, res string) *corev1.Pod {
	no, grace := false, int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": "sriov-e2e"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: PauseImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/pause"},
			}},
		},
	}
	if nad != "" {
		p.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: nad}
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

// CreatePod creates a pod.
func (c *Cluster) CreatePod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// WaitRunning watches a pod of Namespace until it runs with every
// container ready, and fails early when it can no longer start (a failed
// phase), returning the pod as it ended.
func (c *Cluster) WaitRunning(ctx context.Context, name string, timeout time.Duration) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, err
		}
		if len(list.Items) == 1 {
			if p, done, err := runningOrEnded(&list.Items[0]); done {
				return p, err
			}
		}
		w, err := c.Client.CoreV1().Pods(Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, err
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if p, done, err := runningOrEnded(p); done {
				w.Stop()
				return p, err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pod %s not running within %v: %s", name, timeout, c.PodTrouble(name))
		}
	}
}

// runningOrEnded tells whether a pod is ready (done, no error) or can no
// longer be (done, with its phase and reason).
func runningOrEnded(p *corev1.Pod) (*corev1.Pod, bool, error) {
	switch {
	case PodReady(p):
		return p, true, nil
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		return p, true, fmt.Errorf("pod %s ended %s: %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	return p, false, nil
}

// PodReady tells whether the pod runs with its Ready condition true.
func PodReady(p *corev1.Pod) bool {
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

// PodTrouble summarizes why a pod of Namespace is not running: its phase
// and its warning events.
func (c *Cluster) PodTrouble(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	msg := "phase " + string(p.Status.Phase)
	for _, e := range c.PodEvents(ctx, name, corev1.EventTypeWarning) {
		msg += fmt.Sprintf("; %s: %s", e.Reason, e.Message)
	}
	return msg
}

// PodEvents lists the events of a pod of Namespace of a type ("" for all);
// none when they cannot be listed.
func (c *Cluster) PodEvents(ctx context.Context, name, typ string) []corev1.Event {
	sel := fields.Set{"involvedObject.name": name, "involvedObject.namespace": Namespace}
	if typ != "" {
		sel["type"] = typ
	}
	list, err := c.Client.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return nil
	}
	return list.Items
}

// DeletePods deletes pods of Namespace at once and waits until they are
// gone. The deletion is graceful (the pods' one second), never forced:
// kubelet removes the object only once it has stopped the containers and
// the sandbox (CNI DEL included), so gone means torn down.
func (c *Cluster) DeletePods(ctx context.Context, timeout time.Duration, names ...string) error {
	for _, n := range names {
		err := c.Client.CoreV1().Pods(Namespace).Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return WaitFor(timeout, 100*time.Millisecond, "pods deleted", func() (bool, error) {
		var left []string
		for _, n := range names {
			_, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, n, metav1.GetOptions{})
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

// NetworkStatus decodes the pod's network-status annotation (written by
// Multus from each network's CNI result).
func NetworkStatus(p *corev1.Pod) ([]nadv1.NetworkStatus, error) {
	raw, ok := p.Annotations[nadv1.NetworkStatusAnnot]
	if !ok {
		return nil, fmt.Errorf("pod %s has no %s annotation", p.Name, nadv1.NetworkStatusAnnot)
	}
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("pod %s: %s: %w", p.Name, nadv1.NetworkStatusAnnot, err)
	}
	return st, nil
}

// PodNetns finds the pod's network namespace among the runtime's (under
// /run/netns) as the one whose eth0 holds the pod IP kubelet reported: the
// runtime's view, independent of what the plugin recorded.
func (c *Cluster) PodNetns(p *corev1.Pod) (string, error) {
	ip := net.ParseIP(p.Status.PodIP)
	if ip == nil {
		return "", fmt.Errorf("pod %s has no pod IP", p.Name)
	}
	var found []string
	for _, path := range c.Node.PodNetnsPaths() {
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

// LinkIn returns a link of the netns bound at netnsPath by name (nil when
// absent).
func LinkIn(netnsPath, name string) (netlink.Link, error) {
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

// RenameIn renames a link inside the netns bound at netnsPath, as a udev
// rule or a user in the pod would.
//
// Equivalent to: ip -n $netns link set $from down; ip -n $netns link set
// $from name $to; ip -n $netns link set $to up
func RenameIn(netnsPath, from, to string) error {
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

// ContainerLog reads a container's log from the node (/var/log/pods).
func ContainerLog(p *corev1.Pod, container string) string {
	dir := filepath.Join("/var/log/pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), container)
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out strings.Builder
	for _, f := range files {
		out.WriteString(ReadText(f))
	}
	return out.String()
}
