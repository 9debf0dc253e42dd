package kubecluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// StartControlPlane starts etcd and kube-apiserver alone, in the run
// stage's private namespaces as Start does, for what needs a real API
// server and no node (the fleet benchmark, make fleet-bench): no
// containerd, kubelet, controllers or fixture. The API server serves on
// NodeIP:6443 in the run's network namespace; cfg.BinDir needs etcd and
// kube-apiserver only. Teardown stops both and judges what is left, as
// after Start.
func StartControlPlane(cfg Config) (*Cluster, error) {
	return launch(cfg, "start the control plane", (*Cluster).startControlPlane)
}

func (c *Cluster) startControlPlane() error {
	c.Node = &Node{LogDir: filepath.Join(c.cfg.WorkDir, "logs"), varLogDir: filepath.Join(c.cfg.WorkDir, "var-log")}
	if err := recordNamespaces(c.cfg.WorkDir); err != nil {
		return err
	}
	if err := privateDirs(c.Node); err != nil {
		return err
	}
	if err := nodeAddress(); err != nil {
		return err
	}
	var err error
	if c.PKI, err = newPKI(filepath.Join(runDir, "pki"), "https://"+net.JoinHostPort(NodeIP, "6443")); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	for _, s := range []struct {
		what string
		do   func() error
	}{{"etcd", c.startEtcd}, {"kube-apiserver", c.startAPIServer}} {
		t0 := time.Now()
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(c.cfg.Progress, "cluster: %s: %.1f s\n", s.what, time.Since(t0).Seconds())
	}
	return nil
}

// CreateCRD creates the CustomResourceDefinition of a manifest (one
// object) and waits until it is Established.
func (c *Cluster) CreateCRD(ctx context.Context, manifest string) error {
	return c.createCRD(ctx, manifest)
}
