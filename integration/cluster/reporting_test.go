//go:build clustere2e

package cluster

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// Issue 17's scenarios (s8 to sb): the monitor tells Kubernetes, deployed
// with deploy/kube-reporting (or deploy/kube-reporting-taint) as an
// operator would add it. Their files are named s8, s9, sa, sb, and their
// tests TestS8…, TestS9…, TestSA…, TestSB…, so that they run after
// scenarios 0 to 7 (go test runs files in lexical order, where s10 would
// come before s2) and so that -test.run=TestS1 selects scenario 1 alone.

// doctorInterval replaces the shipped --doctor-interval (5 min) in
// scenarios 9 and 10, the one change the e2e makes to the shipped
// reporting components: the node doctor runs only on its interval (nothing
// triggers it), and those scenarios wait for its findings four times.
// Scenario 8 runs deploy/kube-reporting as shipped: sweep interval 30 s,
// in-cluster configuration through the kubernetes Service (kube-proxy).
const doctorInterval = 2 * time.Second

const (
	componentReporting = "../kube-reporting"
	componentTaint     = "../kube-reporting-taint"
	taintRole          = "sriov-stable-agent-taint" // the ClusterRole and binding of componentTaint
	taintKey           = "sriov-stable-cni.io/vf-unhealthy"
	conditionType      = "SRIOVVFsHealthy"
	agentUser          = "system:serviceaccount:" + daemonSetNamespace + ":" + daemonSetName
)

// reportingNow is the component and doctor setting the DaemonSet runs
// with ("" before any).
var reportingNow string

// ensureReporting deploys the DaemonSet (at the version it runs) with a
// reporting component, as shipped or (fastDoctor) with --doctor-interval
// set to doctorInterval, unless it already runs so, and waits for its pod.
// Leaving the taint component removes its ClusterRole and binding, as
// kubectl apply --prune would.
func (c *cluster) ensureReporting(t *testing.T, component string, fastDoctor bool) *corev1.Pod {
	t.Helper()
	c.ensureDaemonSet(t)
	ctx := context.Background()
	key := fmt.Sprintf("%s fastDoctor=%v", component, fastDoctor)
	if reportingNow == key {
		p, err := c.daemonSetPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ds, err := c.Client.AppsV1().DaemonSets(daemonSetNamespace).Get(ctx, daemonSetName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(ds.Spec.Template.Spec.Containers[0].Image, *imageName+":")
	objs, err := renderDaemonSet(version, component)
	if err != nil {
		t.Fatal(err)
	}
	if fastDoctor {
		if err := setDoctorInterval(objs, doctorInterval); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	pod, err := c.applyDaemonSet(ctx, objs, version, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if component != componentTaint {
		for _, del := range []func() error{
			func() error {
				return c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, taintRole, metav1.DeleteOptions{})
			},
			func() error { return c.Client.RbacV1().ClusterRoles().Delete(ctx, taintRole, metav1.DeleteOptions{}) },
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	reportingNow = key
	what := "DaemonSet with " + filepath.Base(component) + " as shipped rolled out"
	if fastDoctor {
		what = "DaemonSet with " + filepath.Base(component) + ", --doctor-interval=" + doctorInterval.String() + ", rolled out"
	}
	figf("reporting", what, "%.1f s", time.Since(start).Seconds())
	return pod
}

// setDoctorInterval sets the rendered DaemonSet's monitor's
// --doctor-interval (see doctorInterval); nothing else changes.
func setDoctorInterval(objs []*unstructured.Unstructured, every time.Duration) error {
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
		j := slices.IndexFunc(cs[i].Args, func(a string) bool { return strings.HasPrefix(a, "--doctor-interval=") })
		if j < 0 {
			return fmt.Errorf("the rendered monitor has no --doctor-interval: %q", cs[i].Args)
		}
		cs[i].Args[j] = "--doctor-interval=" + every.String()
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds)
		if err != nil {
			return err
		}
		o.Object = m
	}
	return nil
}

// inClusterPath checks that the agent of the DaemonSet pod reached the API
// server the way in-cluster configuration does on a real node: through the
// kubernetes Service. The monitor process's environment (which kubelet
// sets from that Service; the manifests set neither variable) names the
// Service's ClusterIP and port; no link of the node holds that address, so
// only kube-proxy's rules can carry a connection to it; and the process
// holds a TCP connection established to it. It returns what it found.
func (c *cluster) inClusterPath(ctx context.Context, ds *corev1.Pod) (string, error) {
	svc, err := c.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	vip, port := net.ParseIP(svc.Spec.ClusterIP), svc.Spec.Ports[0].Port
	pid, err := podProcess(ds, "sriov-stable-agent monitor --in-cluster")
	if err != nil {
		return "", err
	}
	env := processEnv(pid)
	if env["KUBERNETES_SERVICE_HOST"] != vip.String() || env["KUBERNETES_SERVICE_PORT"] != strconv.Itoa(int(port)) {
		return "", fmt.Errorf("the agent (pid %d) has KUBERNETES_SERVICE_HOST=%q KUBERNETES_SERVICE_PORT=%q, not the kubernetes Service's %s:%d",
			pid, env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"], vip, port)
	}
	addrs, err := netlinksafe.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if a.IP.Equal(vip) {
			return "", fmt.Errorf("the node holds the Service's ClusterIP %s itself (%s): a connection to it proves nothing of kube-proxy", vip, a)
		}
	}
	conns := established(pid)
	peer := net.JoinHostPort(vip.String(), strconv.Itoa(int(port)))
	if !slices.Contains(conns, peer) {
		return "", fmt.Errorf("the agent (pid %d) has no TCP connection established to the Service's %s; it has %v", pid, peer, conns)
	}
	var endpoints []string
	eps, err := c.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil {
		return "", err
	}
	for _, sl := range eps.Items {
		for _, e := range sl.Endpoints {
			for _, p := range sl.Ports {
				endpoints = append(endpoints, net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*p.Port))))
			}
		}
	}
	return fmt.Sprintf("KUBERNETES_SERVICE_HOST/PORT %s (no link holds it), connection established to it, kube-proxy's DNAT to %s",
		peer, strings.Join(endpoints, ",")), nil
}

// podProcess finds the process of a pod whose command line starts with
// cmd: by the pod's UID in its cgroup path (kubelet's cgroupfs layout,
// kubepods/…/pod<UID>/<container>).
func podProcess(p *corev1.Pod, cmd string) (int, error) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.HasPrefix(strings.ReplaceAll(string(cmdline), "\x00", " "), "/usr/bin/"+cmd) {
			continue
		}
		cgroup, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if strings.Contains(string(cgroup), "pod"+string(p.UID)) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %q of pod %s (UID %s)", cmd, p.Name, p.UID)
}

// processEnv reads a process's environment.
func processEnv(pid int) map[string]string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// established lists the remote ends (host:port) of the TCP connections
// established in a process's network namespace, as /proc/<pid>/net/tcp and
// tcp6 show them (addresses as the kernel's 32-bit words in host order, an
// IPv4 peer of an IPv6 socket as ::ffff:a.b.c.d).
func established(pid int) []string {
	var out []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "01" { // TCP_ESTABLISHED
				continue
			}
			hexIP, hexPort, _ := strings.Cut(fields[2], ":")
			raw, err := hex.DecodeString(hexIP)
			port, perr := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || perr != nil || len(raw)%4 != 0 {
				continue
			}
			// Each word was printed as a number (%08X) from memory in
			// host order: read the number, put it back in host order.
			ip := make(net.IP, len(raw))
			for w := 0; w < len(raw); w += 4 {
				binary.NativeEndian.PutUint32(ip[w:], binary.BigEndian.Uint32(raw[w:]))
			}
			out = append(out, net.JoinHostPort(ipOrV4(ip).String(), strconv.FormatUint(port, 10)))
		}
	}
	return out
}

// ipOrV4 is ip in its IPv4 form when it has one.
func ipOrV4(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}

// kubectl runs kubectl as the cluster's admin and returns its output, for
// the figures an operator would see; a failure fails the test.
func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		t.Error(err)
	}
	return out
}

// showKubectl prints what kubectl shows, framed, for docs/monitor.md.
func (c *cluster) showKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out := c.kubectl(t, args...)
	t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	return out
}

// agentLogClean checks the monitor's log of the DaemonSet pod for API
// errors: the ClusterRole must let it do all it does.
func agentLogClean(t *testing.T, p *corev1.Pod) {
	t.Helper()
	log := kubecluster.ContainerLog(p, "monitor")
	for _, bad := range []string{"forbidden", "Forbidden", "cannot update"} {
		if strings.Contains(log, bad) {
			t.Errorf("the monitor's log has %q:\n%s", bad, kubecluster.LastLines(log, 30))
			return
		}
	}
}
