//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

// Paths of the node, all private to the run's mount namespace.
const (
	containerdSocket = "/run/containerd/containerd.sock"
	cniBinDir        = "/opt/cni/bin"
	cniConfDir       = runDir + "/net.d"
	// stateDir is the plugin's default state directory, which the
	// DaemonSet's monitor reads.
	stateDir = "/run/cni/sriov-stable"
	// testNamespace holds the tests' pods and NADs.
	testNamespace = "e2e"
)

// The extended resources the device plugin advertises: every VF of the
// fixture but one, and the one with a zero GUID on its own.
const (
	resourceVF       = "sriov-stable-cni.io/ibvf"
	resourceZeroGUID = "sriov-stable-cni.io/ibvf-zero-guid"
)

// cluster is the single-node cluster of the run.
type cluster struct {
	tb   *harness.ProgramTB
	node *node
	pki  *pki

	etcd, containerd, apiserver, controllerManager, scheduler, kubeProxy, kubelet, devicePlugin *proc
	auditLog                                                                                    string // the API server's record of the agent's requests

	rest   *rest.Config
	client kubernetes.Interface
	dyn    dynamic.Interface
	nads   nadclient.Interface

	kubeletRestart restartWindow // scenario 5's kubelet restart
	runtimeLeaks   int           // pod netns containerd leaked in its restart (checkNodeClean)

	upTook      time.Duration
	tornDown    bool
	teardownErr error
	// Found after every component stopped: containerd's shims, the
	// processes under them.
	shimsLeft, shimChildrenLeft []process
}

var theCluster *cluster

// newCluster builds the node and starts every component, in order, each
// waited for. On error the returned cluster can still be torn down.
func newCluster() (*cluster, error) {
	start := time.Now()
	c := &cluster{tb: harness.NewProgramTB()}
	n, err := setupNode(c.tb)
	if err != nil {
		return c, fmt.Errorf("node: %w", err)
	}
	c.node = n
	server := "https://" + nodeIP + ":6443"
	if c.pki, err = newPKI(filepath.Join(runDir, "pki"), server); err != nil {
		return c, fmt.Errorf("pki: %w", err)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"install the CNI plugins", c.installPlugins},
		{"etcd", c.startEtcd},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"kube-apiserver", c.startAPIServer},
		{"controller-manager and scheduler", c.startControllers},
		{"device plugin and kubelet", c.startKubelet},
		{"node ready", c.waitNode},
		{"kube-proxy", c.startKubeProxy},
		{"NetworkAttachmentDefinition CRD and test namespace", c.prepareAPI},
	}
	for _, s := range steps {
		t0 := time.Now()
		if err := s.do(); err != nil {
			return c, fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Printf("cluster: %s: %.1f s\n", s.what, time.Since(t0).Seconds())
	}
	c.upTook = time.Since(start)
	return c, nil
}

// installPlugins puts the upstream CNI plugins the node runs into its CNI
// bin dir (copies: the DaemonSet installs ours next to them) and writes the
// runtime's network configuration: the Multus thin plugin with the
// kubeconfig, delegating the pod network to bridge + host-local.
func (c *cluster) installPlugins() error {
	for _, p := range []string{"multus", "bridge", "host-local", "loopback", "host-device", "rename-as-udev"} {
		if err := copyFile(filepath.Join(*binDir, p), filepath.Join(cniBinDir, p), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cniConfDir, 0o755); err != nil {
		return err
	}
	podNet := map[string]any{
		"cniVersion": "1.0.0", "name": "e2e-pods",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
			// A default route via the bridge: pods reach the node IP (the
			// reporting monitor of issue 17 talks to the API server there).
			"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": podSubnet}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}},
		}},
	}
	multus := map[string]any{
		"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
		"kubeconfig": c.pki.Kubeconfig, "binDir": cniBinDir, "cniDir": "/var/lib/cni/multus",
		"logFile": filepath.Join(c.node.logDir, "multus.log"), "logLevel": "verbose",
		"delegates": []any{podNet},
	}
	b, err := json.MarshalIndent(multus, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cniConfDir, "00-multus.conf"), b, 0o644)
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

func (c *cluster) startEtcd() error {
	c.etcd = newProc(c.node.logDir, "etcd", "--name", "e2e", "--data-dir", filepath.Join(runDir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "e2e=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn")
	if err := c.etcd.start(); err != nil {
		return err
	}
	return waitFor(30*time.Second, 100*time.Millisecond, "etcd healthy", func() (bool, error) {
		if err := c.etcd.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		body, err := httpGet(http.DefaultClient, "http://127.0.0.1:2379/health")
		return err == nil && strings.Contains(body, `"health":"true"`), err
	})
}

func httpGet(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

// containerdConfig: the CRI with our runc, cgroupfs (cgroup v1 here), the
// local pause image, and CNI from the node's dirs.
func containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %[1]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[2]q

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
  # Nothing on this machine may lower an oom_score_adj below its own: its
  # processes run without CAP_SYS_RESOURCE. kubelet asks -998 for every pod
  # sandbox, runc's nsexec fails to write it, and every sandbox fails with
  # "can't get final child's PID from pipe: EOF". Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[3]q
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[4]q]
    conf_dir = %[5]q
    max_conf_num = 1
`, containerdSocket, pauseImage, filepath.Join(*binDir, "runc"), cniBinDir, cniConfDir)
}

func (c *cluster) startContainerd() error {
	cfg := filepath.Join(runDir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig()), 0o644); err != nil {
		return err
	}
	c.containerd = newProc(c.node.logDir, "containerd", "--config", cfg, "--log-level", "info")
	if err := c.containerd.start(); err != nil {
		return err
	}
	return c.waitContainerd()
}

// waitContainerd waits until the CRI answers (ctr talks to the same socket).
func (c *cluster) waitContainerd() error {
	return waitFor(30*time.Second, 100*time.Millisecond, "containerd serving", func() (bool, error) {
		if err := c.containerd.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		_, err := os.Stat(containerdSocket)
		return err == nil, err
	})
}

// importImages loads the pause image and both project images; nothing is
// ever pulled (no registry is reachable).
func (c *cluster) importImages() error {
	pause := filepath.Join(runDir, "pause-image.tar")
	if err := writePauseImage(pause); err != nil {
		return fmt.Errorf("write the pause image: %w", err)
	}
	for _, archive := range []string{pause, imageArchive("a"), imageArchive("b")} {
		if err := c.importImage(archive); err != nil {
			return err
		}
	}
	return nil
}

// auditPolicy records the agent's requests (its service account's) at
// Metadata, one line per request when it completes (a watch also when it
// starts), and nothing of anyone else's: scenario 13 counts them.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["` + agentUser + `"]
  - level: None
`

func (c *cluster) startAPIServer() error {
	policy := filepath.Join(runDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	c.auditLog = filepath.Join(c.node.logDir, "kube-apiserver-audit.log")
	c.apiserver = newProc(c.node.logDir, "kube-apiserver",
		"--audit-policy-file="+policy, "--audit-log-path="+c.auditLog, "--audit-log-format=json",
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address="+nodeIP,
		"--tls-cert-file="+c.pki.ServerCert, "--tls-private-key-file="+c.pki.ServerKey,
		"--client-ca-file="+c.pki.CA,
		"--kubelet-client-certificate="+filepath.Join(c.pki.dir, "admin.crt"),
		"--kubelet-client-key="+filepath.Join(c.pki.dir, "admin.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.SAPub, "--service-account-signing-key-file="+c.pki.SAKey,
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC", "--profiling=false", "--v=1")
	if err := c.apiserver.start(); err != nil {
		return err
	}
	var err error
	if c.rest, err = clientcmd.BuildConfigFromFlags("", c.pki.Kubeconfig); err != nil {
		return err
	}
	c.rest.QPS, c.rest.Burst = 200, 400
	if c.client, err = kubernetes.NewForConfig(c.rest); err != nil {
		return err
	}
	if c.dyn, err = dynamic.NewForConfig(c.rest); err != nil {
		return err
	}
	if c.nads, err = nadclient.NewForConfig(c.rest); err != nil {
		return err
	}
	return waitFor(90*time.Second, 200*time.Millisecond, "kube-apiserver ready", func() (bool, error) {
		if err := c.apiserver.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok", err
	})
}

func (c *cluster) startControllers() error {
	c.controllerManager = newProc(c.node.logDir, "kube-controller-manager",
		"--kubeconfig="+c.pki.Kubeconfig, "--service-account-private-key-file="+c.pki.SAKey,
		"--root-ca-file="+c.pki.CA, "--leader-elect=false", "--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--profiling=false", "--v=1")
	c.scheduler = newProc(c.node.logDir, "kube-scheduler", "--kubeconfig="+c.pki.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--profiling=false", "--v=1")
	if err := c.controllerManager.start(); err != nil {
		return err
	}
	return c.scheduler.start()
}

// kubeletConfig: cgroup v1 allowed (this machine is hybrid), cgroupfs under
// cgroupRoot, no image GC or eviction of the tests' images, authentication
// by the cluster CA.
func (c *cluster) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[4]s
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: [%[5]s]
resolvConf: %[6]s
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.inodesFree: "1%%"
localStorageCapacityIsolation: false
serializeImagePulls: false
`, cgroupRoot, containerdSocket, nodeIP, c.pki.CA, serviceIP(10), filepath.Join(runDir, "resolv.conf"))
}

// serviceIP is the i-th address of the service range.
func serviceIP(i byte) string {
	ip := firstServiceIP().To4()
	return fmt.Sprintf("%d.%d.%d.%d", ip[0], ip[1], ip[2], ip[3]-1+i)
}

func (c *cluster) startKubelet() error {
	var vfs, zero []string
	for _, vf := range c.node.vfs {
		if vf.PCI == c.node.zeroGUID.PCI {
			zero = append(zero, vf.PCI)
		} else {
			vfs = append(vfs, vf.PCI)
		}
	}
	c.devicePlugin = newProc(c.node.logDir, "vf-device-plugin", "-sysfs-root", "/sys",
		"-resource", resourceVF+"="+strings.Join(vfs, ","), "-resource", resourceZeroGUID+"="+strings.Join(zero, ","))
	cfg := filepath.Join(runDir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(c.kubeletConfig()), 0o644); err != nil {
		return err
	}
	// Pods get no DNS: nothing in the tests resolves names.
	if err := os.WriteFile(filepath.Join(runDir, "resolv.conf"), []byte("options ndots:1\n"), 0o644); err != nil {
		return err
	}
	c.kubelet = newProc(c.node.logDir, "kubelet", "--config="+cfg, "--kubeconfig="+c.pki.Kubeconfig,
		"--hostname-override="+nodeName, "--node-ip="+nodeIP, "--v=2")
	if err := c.kubelet.start(); err != nil {
		return err
	}
	return c.devicePlugin.start()
}

// kubeProxyConfig: nftables mode (this kernel has nf_tables built in;
// Debian's nft, which it runs, comes from run.sh's packages), its rules in
// the run's network namespace like everything else. Nothing outside that
// namespace is touched: conntrack limits and timeouts are left as they are
// (maxPerCore 0, min 0, zero timeouts: the nf_conntrack hash size is
// global to the host), no oom_score_adj is asked for (this machine's
// processes cannot lower theirs), and health and metrics listen on
// loopback.
func (c *cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.pki.Kubeconfig, nodeName, nodeIP, podSubnet)
}

// startKubeProxy runs kube-proxy on the node and waits until the
// kubernetes Service's ClusterIP answers: the API server's /readyz through
// the VIP, which no link of the node holds (only kube-proxy's DNAT makes it
// reachable). Pods reach it the same way; scenario 8 checks that the agent
// does.
func (c *cluster) startKubeProxy() error {
	cfg := filepath.Join(runDir, "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(c.kubeProxyConfig()), 0o644); err != nil {
		return err
	}
	c.kubeProxy = newProc(c.node.logDir, "kube-proxy", "--config="+cfg, "--v=1")
	if err := c.kubeProxy.start(); err != nil {
		return err
	}
	vip := rest.CopyConfig(c.rest)
	vip.Host = "https://" + net.JoinHostPort(firstServiceIP().String(), "443")
	client, err := kubernetes.NewForConfig(vip)
	if err != nil {
		return err
	}
	return waitFor(60*time.Second, 200*time.Millisecond, "the kubernetes Service's ClusterIP answering", func() (bool, error) {
		if err := c.kubeProxy.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		if _, err := httpGet(http.DefaultClient, "http://127.0.0.1:10256/healthz"); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
}

// waitNode waits for the node to be Ready with both resources advertised,
// and labels it as Node Feature Discovery would (the DaemonSet selects it).
func (c *cluster) waitNode() error {
	ctx := context.Background()
	err := waitFor(120*time.Second, 250*time.Millisecond, "node Ready with the VF resources", func() (bool, error) {
		if err := c.kubelet.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		if err := c.devicePlugin.exitedEarly(); err != nil {
			return false, fatalErr{err}
		}
		n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !nodeReady(n) {
			return false, errors.New("node not Ready")
		}
		want := map[string]int64{resourceVF: int64(len(c.node.vfs) - 1), resourceZeroGUID: 1}
		for r, v := range want {
			q := n.Status.Allocatable[corev1.ResourceName(r)]
			if q.Value() != v {
				return false, fmt.Errorf("allocatable %s is %d, want %d", r, q.Value(), v)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"feature.node.kubernetes.io/network-sriov.capable":"true"}}}`)
	_, err = c.client.CoreV1().Nodes().Patch(ctx, nodeName, "application/merge-patch+json", patch, metav1.PatchOptions{})
	return err
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// prepareAPI creates the NetworkAttachmentDefinition CRD from
// network-attachment-definition-client's own manifest and the tests'
// namespace, and waits for its default ServiceAccount.
func (c *cluster) prepareAPI() error {
	ctx := context.Background()
	b, err := os.ReadFile(*nadCRD)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("%s: %w", *nadCRD, err)
	}
	crd := &unstructured.Unstructured{Object: obj}
	if _, err := c.dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the NetworkAttachmentDefinition CRD: %w", err)
	}
	err = waitFor(30*time.Second, 100*time.Millisecond, "the CRD Established", func() (bool, error) {
		got, err := c.dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	return waitFor(60*time.Second, 200*time.Millisecond, "the default ServiceAccount of "+testNamespace, func() (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(testNamespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}
