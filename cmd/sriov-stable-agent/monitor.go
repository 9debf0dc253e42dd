package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/nodesync"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/janitor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/kubereport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/monitor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/nodecheck"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/portwatch"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/promexport"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

const monitorUsage = `usage: sriov-stable-agent monitor [flags]

Runs CHECK's drift checks against every attachment the plugin recorded in
its state dir: as soon as the VF's link changes in its pod netns (one
link-notification socket per attachment) or its RDMA port state or link
layer changes (read every --poll-interval), and over every record each
--interval. With --repair, puts right the drift it is asked to, only while
the attachment's owner still holds the VF. Marks attachments whose network
namespace is gone as stale (removing their records after --stale-grace),
runs the node doctor on its own interval, and serves all of it as
Prometheus metrics on /metrics, with /healthz and /readyz. Logs go to
stderr.

Repairs (--repair, comma-separated; default none):
  altname  re-add a pod VF's stable altname (no effect on traffic)
  name     rename a pod VF back to its recorded ifname: the link is down
           for the few milliseconds the rename takes
  host     give a free VF in the host netns its host name back and remove
           altnames a pod left on it, only where a name is proven to have
           come back from one of its attachments (needs the host netns:
           --host-netns)
Pod repairs need CAP_NET_ADMIN besides CAP_SYS_ADMIN, and are never made
in the host's netns (the agent's own or --host-netns). A GUID, MAC or MTU
is never changed.

Exit status: 0 after SIGTERM or SIGINT, 1 the metrics server failed,
2 bad flags.
`

// runMonitor is `sriov-stable-agent monitor`, the monitor DaemonSet's
// container.
func runMonitor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := cmdline.New("sriov-stable-agent monitor", monitorUsage, stdout, stderr)
	fs := c.Flags
	stateDir := fs.String("state-dir", config.DefaultStateDir, "the plugin's stateDir, where ADD records attachments")
	sysfsRoot := fs.String("sysfs-root", config.DefaultSysfsRoot, "where the host's sysfs is mounted")
	interval := fs.Duration("interval", monitor.DefaultInterval, "time between sweeps over every attachment")
	checkTimeout := fs.Duration("check-timeout", 0, "limit for one attachment's check (default min(5s, interval/2))")
	staleGrace := fs.Duration("stale-grace", monitor.DefaultStaleGrace, "how long to keep the record of an attachment whose netns is gone")
	listen := fs.String("listen", ":9808", "address for /metrics, /healthz and /readyz")
	logLevel := fs.String("log-level", "info", "error, warn, info or debug")
	doctorInterval := fs.Duration("doctor-interval", nodecheck.DefaultInterval, "time between node doctor runs; 0 disables the doctor")
	portInterval := fs.Duration("port-interval", portwatch.DefaultInterval, "with the doctor: how often every RDMA port the host sees (free VFs', PFs') is read, the doctor's port checks run again when one changed, and the result published at once (node condition, device taints, metrics); 0 leaves ports to the doctor's runs")
	events := fs.Bool("events", true, "check an attachment as soon as its VF's link or port changes; false: the sweep alone finds drift")
	pollInterval := fs.Duration("poll-interval", monitor.DefaultPollInterval, "how often the recorded VFs' RDMA port state and link layer are read and their netns paths looked at (with --events)")
	repair := fs.String("repair", "", "drift to put right: a comma-separated list of altname, name, host (default none)")
	hostNetns := fs.String("host-netns", "", "the host's network namespace for --repair=host, e.g. /proc/1/ns/net (default: the agent's own)")
	expect := addDoctorFlags(fs, "doctor: ")
	kube := addKubeFlags(fs)
	if code, ok := c.Parse(args); !ok {
		return code
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return c.Fail(cmdline.ExitUsage, "--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	repairs, err := monitor.ParseRepairs(*repair)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "--repair: %v", err)
	}
	opts, err := expect.options(*sysfsRoot)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	opts.StateDir = *stateDir
	if *portInterval < 0 {
		return c.Fail(cmdline.ExitUsage, "--port-interval %s is negative", *portInterval)
	}
	if *doctorInterval < 0 {
		return c.Fail(cmdline.ExitUsage, "--doctor-interval %s is negative", *doctorInterval)
	}
	rep, fabric, stopKube, err := kube.start(ctx, *doctorInterval > 0, state.NewStore(*stateDir), sysfs.Reader{Root: *sysfsRoot}, log)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	defer stopKube()
	a, err := newAgent(agentConfig{
		monitor: monitor.Config{
			StateDir: *stateDir, SysfsRoot: *sysfsRoot, Interval: *interval, CheckTimeout: *checkTimeout,
			StaleGrace: *staleGrace, Logger: log, SweepOnly: !*events, PollInterval: *pollInterval,
			Repairs: repairs, HostNetns: *hostNetns,
		},
		doctor: opts, doctorInterval: *doctorInterval, portInterval: *portInterval, kube: rep, fabric: fabric,
	})
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	return serve(ctx, c, a, *listen, log)
}

// serve runs the agent's sources and its HTTP exporter on listen until ctx
// ends (SIGTERM) or the server fails, then stops both within stopTimeout.
func serve(ctx context.Context, c *cmdline.Command, a *agent, listen string, log *slog.Logger) int {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), a.collector())
	if a.fabric != nil {
		reg.MustRegister(nodeFabricCollector{a.fabric})
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "listen for metrics: %v", err)
	}
	srv, ln := promexport.NewServer(ln, promexport.Handler(reg, a.probes()), promexport.DefaultMaxConns)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		a.run(ctx)
	}()
	code := cmdline.ExitOK
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("metrics server stopped", "err", err)
		code = cmdline.ExitFailure
	}
	cancel()
	// Everything stops within stopTimeout, well inside the DaemonSet's
	// grace period: the monitor's loops end at once, and a goroutine
	// blocked in a sysfs or netlink read is left behind (exiting ends it).
	shutdownCtx, done := context.WithTimeout(context.Background(), stopTimeout)
	defer done()
	_ = srv.Shutdown(shutdownCtx)
	select {
	case <-monDone:
		log.Info("drift monitor stopped")
	case <-shutdownCtx.Done():
		log.Warn("drift monitor did not stop in time; exiting without it", "timeout", stopTimeout)
	}
	return code
}

// stopTimeout bounds the agent's shutdown after SIGTERM: the metrics
// server's and the monitor's together. The DaemonSet gives the pod 10 s.
const stopTimeout = 5 * time.Second

// agentConfig is what the monitor command runs: the attachment watcher's
// configuration, the doctor's options and intervals (doctorInterval 0:
// no node checks; portInterval 0: no port watcher) and the Kubernetes
// reporter and the fabric syncer (each nil when not asked for).
type agentConfig struct {
	monitor        monitor.Config
	doctor         doctor.Options
	doctorInterval time.Duration
	portInterval   time.Duration
	kube           *kubereport.Reporter
	fabric         *nodesync.Syncer
}

// agent is the monitor command's sources (checks → findings), each
// feeding the exporters: the Kubernetes reporter as their notifier, the
// Prometheus collector and /healthz through their snapshots.
type agent struct {
	mon   *monitor.Monitor
	nodes *nodecheck.Checker // nil: the doctor is off
	jan   *janitor.Janitor   // nil: no --repair=host
	// fabric publishes the node's VF identities after each doctor run and
	// port change (a notifier of the node checks) and record change; nil
	// without --fabric-publish.
	fabric *nodesync.Syncer
}

func newAgent(cfg agentConfig) (*agent, error) {
	mc := cfg.monitor
	interval, timeout, err := monitor.Timing(mc)
	if err != nil {
		return nil, fmt.Errorf("monitor configuration: %w", err)
	}
	a := agent{fabric: cfg.fabric}
	if mc.Repairs.Host {
		jc := janitor.Config{StateDir: mc.StateDir, SysfsRoot: mc.SysfsRoot, HostNetns: mc.HostNetns,
			AltName: cfg.doctor.AltName, Spec: cfg.doctor.Spec, LinkDir: cfg.doctor.LinkDir,
			Interval: interval, Timeout: timeout, Logger: mc.Logger}
		if cfg.kube != nil {
			jc.Notifiers = []janitor.Notifier{cfg.kube}
		}
		if a.jan, err = janitor.New(jc); err != nil {
			return nil, fmt.Errorf("host janitor: %w", err)
		}
		mc.Carried = a.jan.Carried
	}
	if cfg.kube != nil {
		mc.Notifiers = append(mc.Notifiers, cfg.kube)
	}
	if a.mon, err = monitor.New(mc); err != nil {
		return nil, err
	}
	if cfg.doctorInterval > 0 {
		nc := nodecheck.Config{Doctor: cfg.doctor, Interval: cfg.doctorInterval, PortInterval: cfg.portInterval,
			StuckAfter: interval, Logger: mc.Logger}
		if cfg.portInterval == 0 {
			nc.PortInterval = -1 // off
		}
		if cfg.kube != nil {
			nc.Notifiers = []nodecheck.Notifier{cfg.kube}
		}
		if cfg.fabric != nil {
			nc.Notifiers = append(nc.Notifiers, cfg.fabric)
		}
		if a.nodes, err = nodecheck.New(nc); err != nil {
			return nil, fmt.Errorf("node checks: %w", err)
		}
	}
	return &a, nil
}

// run runs every source until ctx ends. It returns once the attachment
// watcher has: the node checks and the janitor, whose reads of a wedged
// device may never return, are not waited for.
func (a *agent) run(ctx context.Context) {
	if a.nodes != nil {
		go a.nodes.Run(ctx)
	}
	if a.jan != nil {
		go a.jan.Run(ctx)
	}
	if a.fabric != nil {
		go a.fabric.Run(ctx)
	}
	a.mon.Run(ctx)
}

// collector is the Prometheus exporter over the sources' snapshots.
func (a *agent) collector() prometheus.Collector {
	src := promexport.Sources{Attachments: a.mon.Snapshot}
	if a.nodes != nil {
		src.Node = a.nodes.Snapshot
	}
	if a.jan != nil {
		src.HostRepairs = a.jan.Snapshot
	}
	return promexport.NewCollector(src)
}

// probes are /healthz and /readyz: the attachment watcher's health, and
// what each source cannot make progress on.
func (a *agent) probes() promexport.Probes {
	p := promexport.Probes{Health: a.mon.Health, Ready: a.mon.Ready}
	if a.nodes != nil {
		p.Stuck = append(p.Stuck, a.nodes.Stuck)
	}
	if a.jan != nil {
		p.Stuck = append(p.Stuck, a.jan.Stuck)
	}
	p.Stuck = append(p.Stuck, a.mon.Stuck)
	return p
}
