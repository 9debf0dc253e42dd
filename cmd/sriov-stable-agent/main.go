// Command sriov-stable-agent is the node agent shipped next to the
// sriov-stable-cni plugin: `sriov-stable-agent monitor` re-checks every
// attachment for drift and runs the node doctor, serving Prometheus metrics;
// `doctor` and `hostconfig` are the operator's node commands. It is a
// separate binary so the CNI plugin, exec'd on every pod attach, carries
// neither client_golang nor the doctor, hostconfig and their YAML parser.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/monitor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/nodecli"
)

const usage = `sriov-stable-agent: node agent for sriov-stable-cni.

  sriov-stable-agent monitor [flags]      re-check attachments for drift, run the node doctor, serve /metrics
  sriov-stable-agent doctor [flags]       check this node for the known SR-IOV root causes
  sriov-stable-agent hostconfig [flags]   generate persistent VF names and GUID setup, or check a node
  sriov-stable-agent version              version and commit

Run "sriov-stable-agent COMMAND --help" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "monitor":
		return runMonitor(ctx, args[1:], stdout, stderr)
	case "doctor":
		return nodecli.Doctor(args[1:], stdout, stderr)
	case "hostconfig":
		return nodecli.Hostconfig(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintf(stdout, "sriov-stable-agent %s\ncommit: %s\n", buildinfo.Version, buildinfo.Commit)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sriov-stable-agent: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func runMonitor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", config.DefaultStateDir, "the plugin's stateDir, where ADD records attachments")
	sysfsRoot := fs.String("sysfs-root", config.DefaultSysfsRoot, "where the host's sysfs is mounted")
	interval := fs.Duration("interval", monitor.DefaultInterval, "time between sweeps over every attachment")
	checkTimeout := fs.Duration("check-timeout", 0, "limit for one attachment's check (default min(5s, interval/2))")
	staleGrace := fs.Duration("stale-grace", monitor.DefaultStaleGrace, "how long to keep the record of an attachment whose netns is gone")
	listen := fs.String("listen", ":9808", "address for /metrics, /healthz and /readyz")
	logLevel := fs.String("log-level", "info", "error, warn, info or debug")
	doctorInterval := fs.Duration("doctor-interval", monitor.DefaultDoctorInterval, "time between node doctor runs; 0 disables the doctor")
	kmsg := fs.String("kmsg", "/dev/kmsg", "kernel log for the doctor: /dev/kmsg or a dmesg file; \"\" skips it")
	expectVFs := fs.Int("expect-vfs", 0, "doctor: VFs every Mellanox PF should have (0: no expectation)")
	linkLayer := fs.String("link-layer", config.LinkLayerAuto, "doctor: expected link layer (infiniband, ethernet, auto)")
	altName := fs.String("alt-name", config.DefaultAltName, "doctor: the plugin's altName template")
	namePattern := fs.String("name-pattern", "", "doctor: regular expression host VF netdev names must match")
	specFile := fs.String("spec", "", "doctor: the node's hostconfig spec (node.yaml) to compare the node with")
	fs.Usage = func() {} // --help prints to stdout below; a bad flag gets a one-line hint
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "usage: sriov-stable-agent monitor [flags]\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintln(stderr, "run \"sriov-stable-agent monitor --help\" for the flags")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sriov-stable-agent monitor: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent monitor: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg := monitor.Config{
		StateDir: *stateDir, SysfsRoot: *sysfsRoot, Interval: *interval, CheckTimeout: *checkTimeout,
		StaleGrace: *staleGrace, DoctorInterval: *doctorInterval, Logger: log,
	}
	if *doctorInterval > 0 {
		cfg.Doctor = &doctor.Options{SysfsRoot: *sysfsRoot, KernelLog: *kmsg, ExpectVFs: *expectVFs, LinkLayer: *linkLayer, AltName: *altName}
		if *namePattern != "" {
			re, err := regexp.Compile(*namePattern)
			if err != nil {
				fmt.Fprintf(stderr, "sriov-stable-agent monitor: --name-pattern: %v\n", err)
				return 2
			}
			cfg.Doctor.NamePattern = re
		}
		if *specFile != "" {
			spec, err := nodecli.ReadSpec(*specFile)
			if err != nil {
				fmt.Fprintf(stderr, "sriov-stable-agent monitor: %v\n", err)
				return 2
			}
			cfg.Doctor.Spec = spec
		}
	}
	mon, err := monitor.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent monitor: %v\n", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), mon.Collector())

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "sriov-stable-agent monitor: listen for metrics: %v\n", err)
		return 1
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
	code := 0
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("metrics server stopped", "err", err)
		code = 1
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = srv.Shutdown(shutdownCtx)
	<-monDone
	log.Info("drift monitor stopped")
	return code
}
