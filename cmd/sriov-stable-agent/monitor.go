package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/cmdline"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/monitor"
)

const monitorUsage = `usage: sriov-stable-agent monitor [flags]

Every interval runs CHECK's drift checks against every attachment the
plugin recorded in its state dir, marks attachments whose network namespace
is gone as stale (removing their records after --stale-grace), runs the
node doctor on its own interval, and serves all of it as Prometheus metrics
on /metrics, with /healthz and /readyz. Logs go to stderr.
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
	doctorInterval := fs.Duration("doctor-interval", monitor.DefaultDoctorInterval, "time between node doctor runs; 0 disables the doctor")
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

	cfg := monitor.Config{
		StateDir: *stateDir, SysfsRoot: *sysfsRoot, Interval: *interval, CheckTimeout: *checkTimeout,
		StaleGrace: *staleGrace, DoctorInterval: *doctorInterval, Logger: log,
	}
	if *doctorInterval > 0 {
		opts, err := expect.options(*sysfsRoot)
		if err != nil {
			return c.Fail(cmdline.ExitUsage, "%v", err)
		}
		cfg.Doctor = &opts
	}
	stopKube, err := kube.start(ctx, &cfg, log)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	defer stopKube()
	mon, err := monitor.New(cfg)
	if err != nil {
		return c.Fail(cmdline.ExitUsage, "%v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), mon.Collector())

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return c.Fail(cmdline.ExitFailure, "listen for metrics: %v", err)
	}
	srv := &http.Server{Handler: mon.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		mon.Run(ctx)
	}()
	code := cmdline.ExitOK
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("metrics server stopped", "err", err)
		code = cmdline.ExitFailure
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = srv.Shutdown(shutdownCtx)
	<-monDone
	log.Info("drift monitor stopped")
	return code
}
