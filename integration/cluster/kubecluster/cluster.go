package kubecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

// Cluster is the single-node cluster of a run, every component up and
// waited for once Start returns it.
type Cluster struct {
	// REST is the admin's (system:masters) client configuration; Client,
	// Dynamic and NADs are its clients.
	REST    *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	NADs    nadclient.Interface
	Node    *Node // the fixture node
	PKI     *PKI
	// AuditLog is the API server's audit log of Config.AuditUsers'
	// requests (JSON lines).
	AuditLog string

	cfg Config
	tb  *harness.ProgramTB

	etcd, containerd, apiserver, controllerManager, scheduler, kubeProxy, kubelet, devicePlugin *proc

	tornDown    bool
	leftovers   Leftovers
	teardownErr error
}

// Start builds the node and starts every component, in order, each waited
// for. It runs only in the run stage of Run: inside the private
// namespaces, where the teardown may kill every process it finds. On error
// it tears down what it started and returns both errors.
func Start(cfg Config) (*Cluster, error) {
	return launch(cfg, "start", (*Cluster).start)
}

// launch runs start on a new cluster of cfg, in the run stage only; on
// error it tears down what start started and returns both errors.
func launch(cfg Config, what string, start func(*Cluster) error) (*Cluster, error) {
	if err := inRunStage(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	c := &Cluster{cfg: cfg, tb: harness.NewProgramTB()}
	if err := start(c); err != nil {
		if _, terr := c.Teardown(); terr != nil {
			err = errors.Join(err, fmt.Errorf("teardown after the failed start: %w", terr))
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start() error {
	n, err := setupNode(c.tb, c.cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	c.Node = n
	if c.PKI, err = newPKI(filepath.Join(runDir, "pki"), "https://"+net.JoinHostPort(NodeIP, "6443")); err != nil {
		return fmt.Errorf("pki: %w", err)
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
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(c.cfg.Progress, "cluster: %s: %.1f s\n", s.what, time.Since(t0).Seconds())
	}
	return nil
}

// RestartContainerd stops containerd (its shims and containers keep
// running, as in an upgrade of containerd), starts it again and waits
// until it serves.
func (c *Cluster) RestartContainerd() error {
	if err := c.containerd.restart(30 * time.Second); err != nil {
		return err
	}
	return c.waitContainerd()
}

// RestartKubelet stops kubelet and starts it again; it returns once
// kubelet is back: its healthz answers, it has posted a Ready heartbeat
// since, and the device plugin has registered again (the VFs allocatable
// as before).
func (c *Cluster) RestartKubelet() error {
	restarted := time.Now()
	if err := c.kubelet.restart(30 * time.Second); err != nil {
		return err
	}
	ctx := context.Background()
	return WaitFor(120*time.Second, 250*time.Millisecond, "kubelet back", func() (bool, error) {
		if err := c.kubelet.exitedEarly(); err != nil {
			return false, err
		}
		if _, err := HTTPGet(http.DefaultClient, "http://127.0.0.1:10248/healthz"); err != nil {
			return false, err
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && (cond.Status != corev1.ConditionTrue || cond.LastHeartbeatTime.Time.Before(restarted.Truncate(time.Second))) {
				return false, fmt.Errorf("no Ready heartbeat since the restart: %s %v", cond.Status, cond.LastHeartbeatTime)
			}
		}
		if err := c.vfsAllocatable(n); err != nil {
			return false, err
		}
		return true, nil
	})
}

// vfsAllocatable checks that the node has every VF of the device plugin
// allocatable: all but the zero-GUID one as ResourceVF, that one as
// ResourceZeroGUID.
func (c *Cluster) vfsAllocatable(n *corev1.Node) error {
	want := map[string]int64{ResourceVF: int64(len(c.Node.VFs) - 1), ResourceZeroGUID: 1}
	for _, r := range []string{ResourceVF, ResourceZeroGUID} {
		q := n.Status.Allocatable[corev1.ResourceName(r)]
		if q.Value() != want[r] {
			return fmt.Errorf("allocatable %s is %d, want %d", r, q.Value(), want[r])
		}
	}
	return nil
}

// Kubectl runs the real kubectl (built by build.sh at the cluster's
// version) as the cluster's admin and returns its output, for what an
// operator would see.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	out, err := c.kubectl(args).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// KubectlTo runs kubectl as Kubectl does with its standard output to
// stdout (a binary stream: kubectl exec … -- cmd -o -), and returns what it
// wrote on standard error.
func (c *Cluster) KubectlTo(stdout io.Writer, args ...string) (string, error) {
	cmd := c.kubectl(args)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stderr.String(), nil
}

// kubectl is the real kubectl with the admin's kubeconfig and args.
func (c *Cluster) kubectl(args []string) *exec.Cmd {
	return exec.Command(filepath.Join(c.cfg.BinDir, "kubectl"), append([]string{"--kubeconfig", c.PKI.Kubeconfig,
		"--cache-dir", filepath.Join(runDir, "kubectl-cache")}, args...)...)
}

// Ctr runs ctr against the cluster's containerd, in the CRI's namespace
// k8s.io, and returns what it printed.
func (c *Cluster) Ctr(args ...string) (string, error) {
	args = append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)
	cmd := exec.Command(filepath.Join(c.cfg.BinDir, "ctr"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}
