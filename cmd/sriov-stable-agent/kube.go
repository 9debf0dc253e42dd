package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/nodesync"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/kubereport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// kubeFlags are the monitor's flags for telling Kubernetes (pod events, the
// node condition and taint, device taint rules). Without --kubeconfig or
// --in-cluster the monitor never talks to the API server.
type kubeFlags struct {
	kubeconfig   *string
	inCluster    *bool
	nodeName     *string
	taintOnError *bool
	taintEffect  *string
	fabric       *bool
	fabricTaint  *bool
}

func addKubeFlags(fs *flag.FlagSet) *kubeFlags {
	return &kubeFlags{
		kubeconfig: fs.String("kubeconfig", "", "tell Kubernetes, with the credentials of this kubeconfig: pod events, node condition "+
			string(kubereport.ConditionType)+", per-VF DeviceTaintRules (docs/monitor.md, \"Telling Kubernetes\")"),
		inCluster:    fs.Bool("in-cluster", false, "tell Kubernetes, with the pod's service account (deploy/kube-reporting)"),
		nodeName:     fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name in Kubernetes (default $NODE_NAME, from the downward API)"),
		taintOnError: fs.Bool("taint-on-error", false, "taint the node "+kubereport.TaintKey+":NoSchedule while the doctor reports an error"),
		taintEffect: fs.String("device-taint-effect", "NoSchedule", "effect of the per-VF device taints: NoSchedule keeps the scheduler "+
			"from allocating an unhealthy VF, None only marks it (Kubernetes 1.35 and later)"),
		fabric: fs.Bool("fabric-publish", os.Getenv("FABRIC_PUBLISH") == "true", "publish this node's VF identities into its NodeVFSet for the fabric GUID ledger, "+
			"and mirror the fabric controller's verdict into the state directory for guidPolicy require (docs/fabric.md; deploy/fabric-publish; default true when $FABRIC_PUBLISH is true)"),
		fabricTaint: fs.Bool("fabric-taint", os.Getenv("FABRIC_TAINT") == "true", "with --fabric-publish: a DeviceTaintRule, key "+finding.TaintFabricGUID+
			", for each VF of the node the fabric controller found second to a GUID another VF of the cluster holds (docs/fabric.md; default true when $FABRIC_TAINT is true)"),
	}
}

// restConfig is the client configuration the flags ask for; nil when they
// ask for none.
func (f *kubeFlags) restConfig() (*rest.Config, error) {
	switch {
	case *f.kubeconfig != "" && *f.inCluster:
		return nil, errors.New("--kubeconfig and --in-cluster exclude each other")
	case *f.kubeconfig != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", *f.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, nil
	case *f.inCluster:
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--in-cluster: %w (deploy/kube-reporting mounts the service account token)", err)
		}
		return cfg, nil
	case *f.taintOnError:
		return nil, errors.New("--taint-on-error needs --kubeconfig or --in-cluster")
	case *f.fabric:
		return nil, errors.New("--fabric-publish needs --kubeconfig or --in-cluster")
	case *f.fabricTaint:
		return nil, errors.New("--fabric-taint needs --fabric-publish and --kubeconfig or --in-cluster")
	}
	return nil, nil
}

// start starts the Kubernetes reporter when the flags ask for one (nil
// otherwise) and with --fabric-publish the fabric syncer over the same
// credentials (nil otherwise: it runs with the agent's sources); the
// returned stop (never nil) ends the reporter once the agent's sources
// have stopped.
func (f *kubeFlags) start(ctx context.Context, doctorOn bool, store *state.Store, sys sysfs.Reader, log *slog.Logger) (
	rep *kubereport.Reporter, fabric *nodesync.Syncer, stop func(), err error) {
	rc, err := f.restConfig()
	if err != nil || rc == nil {
		return nil, nil, func() {}, err
	}
	if *f.fabricTaint && !*f.fabric {
		return nil, nil, func() {}, errors.New("--fabric-taint needs --fabric-publish: the taints follow the verdicts it mirrors")
	}
	if *f.nodeName == "" {
		return nil, nil, func() {}, errors.New("telling Kubernetes needs the node's name: --node-name, or NODE_NAME from the downward API's spec.nodeName")
	}
	if !doctorOn {
		log.Warn("the doctor is off (--doctor-interval=0): no node condition, node taint or device taints, only pod events")
	}
	// client-go logs through klog: into the agent's log instead.
	klog.SetSlogLogger(log)
	rc = rest.AddUserAgent(rc, kubereport.Component)
	client, err := kubereport.NewClient(rc)
	if err != nil {
		return nil, nil, func() {}, err
	}
	if *f.fabric {
		fc, err := fabricclient.New(rc)
		if err != nil {
			return nil, nil, func() {}, err
		}
		// The reporter's watch of the node knows its UID, the NodeVFSet's
		// owner; rep is set before the syncer runs.
		cfg := nodesync.Config{Client: fc, Node: *f.nodeName, Sysfs: sys, Store: store, Logger: log,
			NodeUID: func() (types.UID, bool) { return rep.NodeUID() }}
		if *f.fabricTaint {
			cfg.OnVerdicts = func(vfs map[string][]state.FabricFinding) { rep.Fabric(vfs) }
		}
		if fabric, err = nodesync.New(cfg); err != nil {
			return nil, nil, func() {}, err
		}
	}
	rep, err = kubereport.Start(ctx, kubereport.Config{Client: client, NodeName: *f.nodeName, TaintOnError: *f.taintOnError,
		DeviceTaintEffect: resourcev1.DeviceTaintEffect(*f.taintEffect), Logger: log})
	if err != nil {
		return nil, nil, func() {}, err
	}
	return rep, fabric, rep.Stop, nil
}
