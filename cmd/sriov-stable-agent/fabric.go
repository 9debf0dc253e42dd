package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/controller"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/lease"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/ledger"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/nodesync"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/kubereport"
)

const fabricUsage = `usage: sriov-stable-agent fabric [flags]
       sriov-stable-agent fabric report [--kubeconfig FILE | --in-cluster] [--json]

fabric runs the fabric controller (meant to run as a Deployment): it watches
every node's NodeVFSet, finds duplicate and unassigned VF GUIDs across the
cluster and writes them into the objects' status, with Events on the nodes
and pods (docs/fabric.md). Replicas elect a leader through a Lease; the
others keep their index warm.

fabric report prints every duplicate or invalid GUID with all its holders,
computed from the published NodeVFSets; exit status 1 when there is any.
`

// fabricLease is how the replicas hand over: a leader that stops renewing
// is replaced within leaseDuration+retryPeriod; one that stops cleanly
// releases the Lease at once.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

func runFabric(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "report" {
		return runFabricReport(ctx, args[1:], stdout, stderr)
	}
	c := cmdline.New("sriov-stable-agent fabric", fabricUsage, stdout, stderr)
	fs := c.Flags
	kube := addAPIFlags(fs)
	host, _ := os.Hostname()
	leaseNS := fs.String("lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the replicas' Lease (default $POD_NAMESPACE)")
	leaseName := fs.String("lease-name", "sriov-stable-fabric", "name of the replicas' Lease")
	identity := fs.String("identity", envOr("POD_NAME", host), "this replica's name in the Lease (default $POD_NAME, else the host name)")
	listen := fs.String("listen", ":9812", "address for /metrics and /healthz")
	workers := fs.Int("workers", 4, "status writers while leading")
	qps := fs.Float64("kube-api-qps", 50, "requests per second to the API server, on average (client-go's default, 5, writes a first status of 1,000 nodes in 200 s)")
	burst := fs.Int("kube-api-burst", 100, "requests to the API server in a burst")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	klog.SetSlogLogger(log)
	rc, err := kube.restConfig()
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	if *leaseNS == "" {
		return c.Fail(cmdline.ExitUsage, "--lease-namespace (or POD_NAMESPACE from the downward API) is required")
	}
	if *qps <= 0 || *burst <= 0 {
		return c.Fail(cmdline.ExitUsage, "--kube-api-qps and --kube-api-burst must be positive (got %g and %d)", *qps, *burst)
	}
	rc = rest.AddUserAgent(rc, "sriov-stable-fabric")
	rc.QPS, rc.Burst = float32(*qps), *burst
	fc, err := fabricclient.New(rc)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	kc, err := kubereport.NewClient(rc)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	recorder, broadcaster, err := kubereport.NewEventRecorder(ctx, kc, corev1.EventSource{Component: "sriov-stable-fabric"})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "events: %v", err)
	}
	defer broadcaster.Shutdown()
	leases, err := lease.NewClient(rc, *leaseNS)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	elector, err := lease.New(lease.Config{Client: leases, Name: *leaseName, Identity: *identity,
		Duration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Logger: log})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	ctl := controller.New(controller.Config{Client: fc, Recorder: recorder, Logger: log, Workers: *workers})

	srv, addr, err := serveFabric(ctl, *listen)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "listen for metrics: %v", err)
	}
	defer srv.Close()
	log.Info("fabric controller starting", "identity", *identity, "lease", *leaseNS+"/"+*leaseName, "metrics", addr)

	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx) }()
	// A replica that loses the Lease stands by and campaigns again: its
	// ledger stays warm.
	elector.Run(ctx, ctl.Lead)
	<-done
	return cmdline.ExitOK
}

// serveFabric serves the controller's /metrics and /healthz (200 once its
// informer has listed) on listen.
func serveFabric(ctl *controller.Controller, listen string) (*http.Server, string, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), fabricCollector{ctl})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ctl.Synced() {
			http.Error(w, "the NodeVFSet informer has not listed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// apiFlags are the credentials of a command that needs the API server.
type apiFlags struct {
	kubeconfig *string
	inCluster  *bool
}

func addAPIFlags(fs interface {
	String(string, string, string) *string
	Bool(string, bool, string) *bool
}) apiFlags {
	return apiFlags{
		kubeconfig: fs.String("kubeconfig", "", "the API server and credentials of this kubeconfig"),
		inCluster:  fs.Bool("in-cluster", false, "the pod's service account"),
	}
}

func (f apiFlags) restConfig() (*rest.Config, error) {
	switch {
	case *f.kubeconfig != "" && *f.inCluster:
		return nil, errors.New("--kubeconfig and --in-cluster exclude each other")
	case *f.kubeconfig != "":
		return clientcmd.BuildConfigFromFlags("", *f.kubeconfig)
	case *f.inCluster:
		return rest.InClusterConfig()
	}
	return nil, errors.New("--kubeconfig or --in-cluster is required")
}

// fabricCollector exports the controller's ledger.
type fabricCollector struct{ ctl *controller.Controller }

var (
	fabricDuplicatesDesc = prometheus.NewDesc("sriov_stable_fabric_duplicate_guids",
		"GUIDs held by more than one VF in the cluster (system image GUIDs: by more than one NIC), by finding kind.", []string{"kind"}, nil)
	fabricInvalidDesc = prometheus.NewDesc("sriov_stable_fabric_invalid_guids",
		"Node and port GUIDs published all zeros, all ones or malformed.", nil, nil)
	fabricNodesDesc  = prometheus.NewDesc("sriov_stable_fabric_nodes", "Nodes whose NodeVFSet the controller indexed.", nil, nil)
	fabricVFsDesc    = prometheus.NewDesc("sriov_stable_fabric_vfs", "VFs the controller indexed.", nil, nil)
	fabricLeaderDesc = prometheus.NewDesc("sriov_stable_fabric_leader", "1 while this replica leads (writes statuses).", nil, nil)
	fabricWritesDesc = prometheus.NewDesc("sriov_stable_fabric_status_writes_total", "NodeVFSet status applies this replica made.", nil, nil)
)

func (fabricCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fabricDuplicatesDesc, fabricInvalidDesc, fabricNodesDesc, fabricVFsDesc, fabricLeaderDesc, fabricWritesDesc} {
		ch <- d
	}
}

func (x fabricCollector) Collect(ch chan<- prometheus.Metric) {
	st := x.ctl.Stats()
	for _, k := range []v1alpha1.FindingKind{v1alpha1.DuplicateNodeGUID, v1alpha1.DuplicatePortGUID, v1alpha1.SharedSysImageGUID} {
		ch <- prometheus.MustNewConstMetric(fabricDuplicatesDesc, prometheus.GaugeValue, float64(st.Duplicates[k]), string(k))
	}
	leader := 0.0
	if x.ctl.Leading() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(fabricInvalidDesc, prometheus.GaugeValue, float64(st.Invalid))
	ch <- prometheus.MustNewConstMetric(fabricNodesDesc, prometheus.GaugeValue, float64(st.Nodes))
	ch <- prometheus.MustNewConstMetric(fabricVFsDesc, prometheus.GaugeValue, float64(st.VFs))
	ch <- prometheus.MustNewConstMetric(fabricLeaderDesc, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(fabricWritesDesc, prometheus.CounterValue, float64(x.ctl.Writes()))
}

// nodeFabricCollector exports the node agent's side of the ledger
// (--fabric-publish): what it published and mirrored, and whether either
// is failing.
type nodeFabricCollector struct{ s *nodesync.Syncer }

var (
	nodeFabricAppliesDesc = prometheus.NewDesc("sriov_stable_fabric_publishes_total",
		"Applies of this node's NodeVFSet spec (made only when its VFs' identities changed).", nil, nil)
	nodeFabricReadsDesc = prometheus.NewDesc("sriov_stable_fabric_identity_reads_total",
		"Readings of this node's VF identities (after doctor runs, port changes and record changes).", nil, nil)
	nodeFabricPublishedDesc = prometheus.NewDesc("sriov_stable_fabric_last_publish_timestamp_seconds",
		"Unix time of the last apply of this node's NodeVFSet (0 before the first).", nil, nil)
	nodeFabricVFsDesc = prometheus.NewDesc("sriov_stable_fabric_published_vfs",
		"VFs the last reading of this node's identities found.", nil, nil)
	nodeFabricVerdictsDesc = prometheus.NewDesc("sriov_stable_fabric_verdict_vfs",
		"This node's VFs with a finding in the fabric controller's verdict, as last mirrored into the state directory.", nil, nil)
	nodeFabricFailingDesc = prometheus.NewDesc("sriov_stable_fabric_sync_failing",
		"1 while the last attempt of this work failed (spec: publishing the node's identities, or waiting for its Node's UID; verdicts: mirroring the controller's verdict), else 0.", []string{"work"}, nil)
)

func (nodeFabricCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeFabricAppliesDesc, nodeFabricReadsDesc, nodeFabricPublishedDesc, nodeFabricVFsDesc,
		nodeFabricVerdictsDesc, nodeFabricFailingDesc} {
		ch <- d
	}
}

func (x nodeFabricCollector) Collect(ch chan<- prometheus.Metric) {
	st := x.s.Snapshot()
	published := 0.0
	if !st.Published.IsZero() {
		published = float64(st.Published.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(nodeFabricAppliesDesc, prometheus.CounterValue, float64(st.Applies))
	ch <- prometheus.MustNewConstMetric(nodeFabricReadsDesc, prometheus.CounterValue, float64(st.Reads))
	ch <- prometheus.MustNewConstMetric(nodeFabricPublishedDesc, prometheus.GaugeValue, published)
	ch <- prometheus.MustNewConstMetric(nodeFabricVFsDesc, prometheus.GaugeValue, float64(st.VFs))
	ch <- prometheus.MustNewConstMetric(nodeFabricVerdictsDesc, prometheus.GaugeValue, float64(st.Verdicts))
	for _, w := range []string{nodesync.WorkPublish, nodesync.WorkMirror} {
		failing := 0.0
		if st.Err[w] != "" {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(nodeFabricFailingDesc, prometheus.GaugeValue, failing, w)
	}
}

const fabricReportUsage = `usage: sriov-stable-agent fabric report [--kubeconfig FILE | --in-cluster] [--json]

Lists every NodeVFSet and prints each duplicate or invalid GUID with all its
holders, the one that keeps it first; exit status 1 when there is any, 0
when the fabric is clean.
`

func runFabricReport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent fabric report", fabricReportUsage, stdout, stderr)
	kube := addAPIFlags(c.Flags)
	asJSON := c.Flags.Bool("json", false, "print the conflicts as JSON")
	if code, ok := c.Parse(args); !ok {
		return code
	}
	rc, err := kube.restConfig()
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	fc, err := fabricclient.New(rc)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "%v", err)
	}
	list, err := fc.List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "list NodeVFSets: %v", err)
	}
	l := ledger.New()
	for _, s := range list.Items {
		l.Set(s.Name, s.Spec.VFs)
	}
	conflicts := l.Conflicts()
	st := l.Stats()
	if *asJSON {
		if conflicts == nil {
			conflicts = []ledger.Conflict{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Nodes     int               `json:"nodes"`
			VFs       int               `json:"vfs"`
			Conflicts []ledger.Conflict `json:"conflicts"`
		}{st.Nodes, st.VFs, conflicts}); err != nil {
			return c.Fail(cmdline.ExitFailure, "%v", err)
		}
	} else {
		writeReport(stdout, conflicts, st)
	}
	if len(conflicts) > 0 {
		return cmdline.ExitFailure
	}
	return cmdline.ExitOK
}

// maxHoldersShown keeps a row on one line when one GUID list was copied to
// every node.
const maxHoldersShown = 3

// writeReport prints the conflicts as a table, a row per GUID, holders in
// the order they published it (the first keeps it).
func writeReport(w io.Writer, conflicts []ledger.Conflict, st ledger.Stats) {
	if len(conflicts) == 0 {
		fmt.Fprintf(w, "no duplicate or invalid GUIDs: %d nodes, %d VFs\n", st.Nodes, st.VFs)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tGUID\tHOLDERS (FIRST KEEPS IT)")
	for _, c := range conflicts {
		kind := string(c.Kind)
		if c.Field != "" {
			kind += " (" + c.Field + ")"
		}
		var hs []string
		for _, h := range c.Holders[:min(len(c.Holders), maxHoldersShown)] {
			s := h.Node + " " + h.PCI
			if h.Pod != nil {
				s += " pod " + h.Pod.Namespace + "/" + h.Pod.Name
			}
			hs = append(hs, s)
		}
		if more := len(c.Holders) - maxHoldersShown; more > 0 {
			hs = append(hs, fmt.Sprintf("+%d more", more))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", kind, c.GUID, strings.Join(hs, " | "))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d conflicts over %d nodes, %d VFs (kubectl get nodevfsets -o yaml: each node's status names them per VF)\n", len(conflicts), st.Nodes, st.VFs)
}
