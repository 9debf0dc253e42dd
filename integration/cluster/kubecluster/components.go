package kubecluster

import (
	"context"
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
)

// The start-up steps of Start, in their order.

// installPlugins puts the upstream CNI plugins the node runs into its CNI
// bin dir (copies: the DaemonSet installs ours next to them) and writes the
// runtime's network configuration (multusConfig).
func (c *Cluster) installPlugins() error {
	for _, p := range []string{"multus", "bridge", "host-local", "loopback", "host-device", "rename-as-udev"} {
		if err := copyFile(filepath.Join(c.cfg.BinDir, p), filepath.Join(CNIBinDir, p), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cniConfDir, 0o755); err != nil {
		return err
	}
	b, err := multusConfig(c.PKI.Kubeconfig, c.Node.LogDir)
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

func (c *Cluster) startEtcd() error {
	c.etcd = c.newProc("etcd", "--name", "e2e", "--data-dir", filepath.Join(runDir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "e2e=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn")
	if err := c.etcd.start(); err != nil {
		return err
	}
	return WaitFor(30*time.Second, 100*time.Millisecond, "etcd healthy", func() (bool, error) {
		if err := c.etcd.exitedEarly(); err != nil {
			return false, err
		}
		body, err := HTTPGet(http.DefaultClient, "http://127.0.0.1:2379/health")
		return err == nil && strings.Contains(body, `"health":"true"`), err
	})
}

func (c *Cluster) startContainerd() error {
	cfg := filepath.Join(runDir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(c.cfg.BinDir)), 0o644); err != nil {
		return err
	}
	c.containerd = c.newProc("containerd", "--config", cfg, "--log-level", "info")
	if err := c.containerd.start(); err != nil {
		return err
	}
	return c.waitContainerd()
}

// waitContainerd waits until the CRI's socket is there (ctr talks to the
// same socket).
func (c *Cluster) waitContainerd() error {
	return WaitFor(30*time.Second, 100*time.Millisecond, "containerd serving", func() (bool, error) {
		if err := c.containerd.exitedEarly(); err != nil {
			return false, err
		}
		_, err := os.Stat(containerdSocket)
		return err == nil, err
	})
}

// apiServerArgs are kube-apiserver's flags: etcd on loopback, serving on
// the node IP with the PKI's certificate, clients by the cluster CA, the
// service account key pair, RBAC, and the audit log of policy.
func apiServerArgs(p *PKI, policy, auditLog string) []string {
	return []string{
		"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog, "--audit-log-format=json",
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address=" + NodeIP,
		"--tls-cert-file=" + p.ServerCert, "--tls-private-key-file=" + p.ServerKey,
		"--client-ca-file=" + p.CA,
		"--kubelet-client-certificate=" + p.ClientCert, "--kubelet-client-key=" + p.ClientKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub, "--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC", "--profiling=false", "--v=1",
	}
}

func (c *Cluster) startAPIServer() error {
	policy := filepath.Join(runDir, "audit-policy.yaml")
	text, err := auditPolicy(c.cfg.AuditUsers)
	if err != nil {
		return err
	}
	if err := os.WriteFile(policy, []byte(text), 0o644); err != nil {
		return err
	}
	c.AuditLog = filepath.Join(c.Node.LogDir, "kube-apiserver-audit.log")
	c.apiserver = c.newProc("kube-apiserver", apiServerArgs(c.PKI, policy, c.AuditLog)...)
	if err := c.apiserver.start(); err != nil {
		return err
	}
	if err := c.clients(); err != nil {
		return err
	}
	return WaitFor(90*time.Second, 200*time.Millisecond, "kube-apiserver ready", func() (bool, error) {
		if err := c.apiserver.exitedEarly(); err != nil {
			return false, err
		}
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok", err
	})
}

// clients makes the admin's clients from the PKI's kubeconfig.
func (c *Cluster) clients() error {
	var err error
	if c.REST, err = clientcmd.BuildConfigFromFlags("", c.PKI.Kubeconfig); err != nil {
		return err
	}
	c.REST.QPS, c.REST.Burst = 200, 400
	if c.Client, err = kubernetes.NewForConfig(c.REST); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.REST); err != nil {
		return err
	}
	c.NADs, err = nadclient.NewForConfig(c.REST)
	return err
}

func (c *Cluster) startControllers() error {
	c.controllerManager = c.newProc("kube-controller-manager",
		"--kubeconfig="+c.PKI.Kubeconfig, "--service-account-private-key-file="+c.PKI.SAKey,
		"--root-ca-file="+c.PKI.CA, "--leader-elect=false", "--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--profiling=false", "--v=1")
	c.scheduler = c.newProc("kube-scheduler", "--kubeconfig="+c.PKI.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--profiling=false", "--v=1")
	if err := c.controllerManager.start(); err != nil {
		return err
	}
	return c.scheduler.start()
}

func (c *Cluster) startKubelet() error {
	var vfs, zero []string
	for _, vf := range c.Node.VFs {
		if vf.PCI == c.Node.ZeroGUID.PCI {
			zero = append(zero, vf.PCI)
		} else {
			vfs = append(vfs, vf.PCI)
		}
	}
	c.devicePlugin = c.newProc("vf-device-plugin", "-sysfs-root", "/sys",
		"-resource", ResourceVF+"="+strings.Join(vfs, ","), "-resource", ResourceZeroGUID+"="+strings.Join(zero, ","))
	cfg := filepath.Join(runDir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(c.PKI.CA)), 0o644); err != nil {
		return err
	}
	// Pods get no DNS: nothing in the tests resolves names.
	if err := os.WriteFile(filepath.Join(runDir, "resolv.conf"), []byte("options ndots:1\n"), 0o644); err != nil {
		return err
	}
	c.kubelet = c.newProc("kubelet", "--config="+cfg, "--kubeconfig="+c.PKI.Kubeconfig,
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=2")
	if err := c.kubelet.start(); err != nil {
		return err
	}
	return c.devicePlugin.start()
}

// waitNode waits for the node to be Ready with both resources advertised,
// and labels it as Node Feature Discovery would (the DaemonSet selects it).
func (c *Cluster) waitNode() error {
	ctx := context.Background()
	err := WaitFor(120*time.Second, 250*time.Millisecond, "node Ready with the VF resources", func() (bool, error) {
		if err := errors.Join(c.kubelet.exitedEarly(), c.devicePlugin.exitedEarly()); err != nil {
			return false, Fatal(err)
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !nodeReady(n) {
			return false, errors.New("node not Ready")
		}
		if err := c.vfsAllocatable(n); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"feature.node.kubernetes.io/network-sriov.capable":"true"}}}`)
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, NodeName, "application/merge-patch+json", patch, metav1.PatchOptions{})
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

// startKubeProxy runs kube-proxy on the node and waits until the
// kubernetes Service's ClusterIP answers: the API server's /readyz through
// the VIP, which no link of the node holds (only kube-proxy's DNAT makes it
// reachable). Pods reach it the same way.
func (c *Cluster) startKubeProxy() error {
	cfg := filepath.Join(runDir, "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(kubeProxyConfig(c.PKI.Kubeconfig)), 0o644); err != nil {
		return err
	}
	c.kubeProxy = c.newProc("kube-proxy", "--config="+cfg, "--v=1")
	if err := c.kubeProxy.start(); err != nil {
		return err
	}
	vip := rest.CopyConfig(c.REST)
	vip.Host = "https://" + net.JoinHostPort(firstServiceIP().String(), "443")
	client, err := kubernetes.NewForConfig(vip)
	if err != nil {
		return err
	}
	return WaitFor(60*time.Second, 200*time.Millisecond, "the kubernetes Service's ClusterIP answering", func() (bool, error) {
		if err := c.kubeProxy.exitedEarly(); err != nil {
			return false, err
		}
		if _, err := HTTPGet(http.DefaultClient, "http://127.0.0.1:10256/healthz"); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// prepareAPI creates the NetworkAttachmentDefinition CRD from
// network-attachment-definition-client's own manifest and the tests'
// namespace, and waits for its default ServiceAccount.
func (c *Cluster) prepareAPI() error {
	ctx := context.Background()
	if err := c.createCRD(ctx, c.cfg.NADCRD); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	return WaitFor(60*time.Second, 200*time.Millisecond, "the default ServiceAccount of "+Namespace, func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(Namespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// createCRD creates the CRD of a manifest and waits until it is
// Established.
func (c *Cluster) createCRD(ctx context.Context, manifest string) error {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("%s: %w", manifest, err)
	}
	crd := &unstructured.Unstructured{Object: obj}
	if _, err := c.Dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the CRD %s: %w", crd.GetName(), err)
	}
	return WaitFor(30*time.Second, 100*time.Millisecond, "the CRD Established", func() (bool, error) {
		got, err := c.Dynamic.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
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
}
