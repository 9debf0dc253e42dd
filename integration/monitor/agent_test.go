package monitor_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/promtext"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil/agenttest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const (
	network  = "mon-net"
	pf       = "0000:18:00.0"
	interval = 200 * time.Millisecond
	// listen is free: the suite runs in its own network namespace.
	listen = "127.0.0.1:9808"
)

// node is the test's node: fixture sysfs, state dir, stand-ins and the pods
// attached to them through libcni.
type node struct {
	t        *testing.T
	bins     string
	sys      *sysfstest.Tree
	stateDir string
	cacheDir string
	vfs      []*testutil.StandIn
	pods     []ns.NetNS
	rts      []*libcni.RuntimeConf
	chains   []*harness.Chain
}

// rdmaVF marks the VF that gets an InfiniBand RDMA device.
const rdmaVF = 1

func newNode(t *testing.T, vfs int) *node {
	t.Helper()
	n := &node{t: t, bins: harness.Bins(t), sys: sysfstest.New(t), stateDir: filepath.Join(t.TempDir(), "state"), cacheDir: t.TempDir()}
	n.sys.AddPF(pf, 16, sysfstest.Device{})
	for i := range vfs {
		d := sysfstest.Device{}
		if i == rdmaVF {
			d.RDMA = &sysfstest.RDMA{Name: "mlx5_11", NodeGUID: "b83f:d203:00aa:0101", FWVer: "28.43.1014"}
		}
		n.sys.AddVF(pf, i, testutil.VFAddr(i), d)
		n.vfs = append(n.vfs, testutil.NewStandIn(t, fmt.Sprintf("mv%d", i), testutil.VFAddr(i), true))
	}
	return n
}

// attach runs ADD for VF i into a new pod through libcni: host-device moves
// the stand-in in, sriov-stable-cni verifies it and records the attachment.
func (n *node) attach(i int) {
	n.t.Helper()
	ours := map[string]any{
		"type": "sriov-stable-cni", "deviceID": testutil.VFAddr(i), "pciBusID": testutil.VFAddr(i),
		"sysfsRoot": n.sys.Root, "stateDir": n.stateDir, "portWaitMs": 300,
		"logFile": filepath.Join(n.stateDir, "..", "plugin.log"),
	}
	hostDevice := map[string]any{"type": "host-device", "device": n.vfs[i].Host}
	chain := harness.NewChainWithCache(n.t, n.bins, n.cacheDir, harness.ConfList("1.1.0", network, hostDevice, ours))
	pod := testutil.NewNetns(n.t)
	rt := harness.Runtime(fmt.Sprintf("pod-%d", i), pod, "net1", nil)
	if _, err := chain.Add(rt); err != nil {
		b, _ := os.ReadFile(filepath.Join(n.stateDir, "..", "plugin.log"))
		n.t.Fatalf("ADD of VF %s: %v\nplugin log:\n%s", testutil.VFAddr(i), err, b)
	}
	n.pods, n.rts, n.chains = append(n.pods, pod), append(n.rts, rt), append(n.chains, chain)
}

// syncBuffer collects the agent's log lines.
type syncBuffer = testutil.LogBuffer

// agent is the agent under test, run by the shared harness; its methods
// end the test t on failure.
type agent struct {
	*agenttest.Agent
	t    *testing.T
	logs *syncBuffer
	pid  int
	url  string
}

// agentBin is bin/sriov-stable-agent from `make build` ($CNI_TEST_BIN_DIR),
// else a fresh build.
func agentBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CNI_TEST_BIN_DIR"); dir != "" {
		if p := filepath.Join(dir, "sriov-stable-agent"); fileExists(p) {
			return p
		}
	}
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(t.TempDir(), "sriov-stable-agent")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/sriov-stable-agent")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, b)
	}
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startAgent runs `sriov-stable-agent monitor` as the DaemonSet would, with
// a short interval, and stops it with SIGTERM at cleanup.
func startAgent(t *testing.T, n *node, extra ...string) *agent {
	t.Helper()
	return startAgentWith(t, n, []string{"sys_admin"}, append([]string{"--interval", interval.String()}, extra...)...)
}

// startAgentWith runs the agent with only the capabilities caps (setpriv
// names: those the DaemonSet grants it, SYS_ADMIN for setns and NET_ADMIN
// too where it repairs, as the manifest in deploy/monitor claims is
// enough) and the given flags after the common ones.
func startAgentWith(t *testing.T, n *node, caps []string, extra ...string) *agent {
	t.Helper()
	args := append([]string{"monitor",
		"--state-dir", n.stateDir, "--sysfs-root", n.sys.Root,
		"--check-timeout", "100ms", "--stale-grace", "1s",
		"--doctor-interval", interval.String(), "--kmsg", "", "--log-level", "info",
	}, extra...)
	ag := agenttest.Start(t, agentBin(t), args, agenttest.Options{Listen: listen, Caps: caps, StopTimeout: 10 * time.Second})
	return &agent{Agent: ag, t: t, logs: ag.Logs(), pid: ag.Pid(), url: ag.URL()}
}

// terminate sends the agent SIGTERM, as the kubelet does, and returns how
// long it took to exit; it must exit 0 within limit, else it is killed.
func (a *agent) terminate(limit time.Duration) time.Duration {
	a.t.Helper()
	took, err := a.StopWithin(limit)
	if err != nil {
		a.t.Error(err)
	}
	return took
}

func (a *agent) get(path string) (int, string) {
	code, body, err := a.Get(path)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

type metrics = promtext.Metrics

func (a *agent) scrape() metrics {
	a.t.Helper()
	return a.Scrape(a.t)
}

// waitFor polls /metrics until cond holds, for at most 15s (the machine is
// shared; the sweep-count assertions below are what bound the latency).
func (a *agent) waitFor(what string, cond func(metrics) bool) metrics {
	a.t.Helper()
	m, _ := a.WaitFor(a.t, what, 15*time.Second, cond)
	return m
}

const sweeps = "sriov_stable_sweeps_total"

func drift(reason string) string {
	return promtext.Series("sriov_stable_attachment_drift", "network", network, "reason", reason)
}

func attachments(status string) string {
	return promtext.Series("sriov_stable_attachments", "network", network, "status", status)
}

// withinOneInterval waits for cond and asserts that the first sweep
// started after the change saw it: at most two sweeps complete between the
// change and the metric moving (one possibly in flight at the change, then
// the next full one). before is the sweep count scraped once the change
// was made: a change that itself took longer than an interval (a loaded
// machine) does not count the sweeps that ran during it.
func (a *agent) withinOneInterval(what string, before float64, cond func(metrics) bool) {
	a.t.Helper()
	start := time.Now()
	m := a.waitFor(what, cond)
	if got := m[sweeps]; got > before+2 {
		a.t.Errorf("%s: seen only after %v sweeps, want it caught by the first sweep after the change (≤ 2)", what, got-before)
	}
	a.t.Logf("%s: seen %v after the change (%v sweeps, interval %v)", what, time.Since(start).Round(time.Millisecond), m[sweeps]-before, interval)
}

func TestMonitorEndToEnd(t *testing.T) {
	n := newNode(t, 3)
	for i := range 3 {
		n.attach(i)
	}
	a := startAgent(t, n)
	a.waitFor("3 healthy attachments", func(m metrics) bool { return m[attachments("ok")] == 3 })

	// 1. A rename inside the pod (what udev or a second CNI does) shows up
	//    as drift within one interval, and its recovery too.
	testutil.RenameIn(t, n.pods[0], "net1", "eth9")
	before := a.scrape()[sweeps]
	a.withinOneInterval("renamed drift", before, func(m metrics) bool { return m[drift("renamed")] == 1 && m[attachments("drifted")] == 1 })
	testutil.RenameIn(t, n.pods[0], "eth9", "net1")
	before = a.scrape()[sweeps]
	a.withinOneInterval("renamed recovery", before, func(m metrics) bool { return m[drift("renamed")] == 0 && m[attachments("ok")] == 3 })

	// 2. The VF loses its carrier (its link partner goes down): port-down.
	n.vfs[0].SetCarrier(t, false)
	before = a.scrape()[sweeps]
	a.withinOneInterval("port-down drift", before, func(m metrics) bool { return m[drift("port-down")] == 1 })
	n.vfs[0].SetCarrier(t, true)
	before = a.scrape()[sweeps]
	a.withinOneInterval("port-down recovery", before, func(m metrics) bool { return m[drift("port-down")] == 0 && m[attachments("ok")] == 3 })

	// 3. One attachment whose RDMA attribute cannot be read (a FIFO where
	//    node_guid belongs: refused as not a regular file, never read) is
	//    unknown without stalling the sweep: a rename elsewhere is still
	//    caught within one interval. (A read that blocks is
	//    TestAgentBesideAStuckPortRead's: only the kept-open port files can
	//    block, and only when opened on the FIFO.)
	unblock := safefiletest.FIFOAt(t, n.sys.DevicePath(testutil.VFAddr(rdmaVF))+"/infiniband/mlx5_11/node_guid", false)
	a.waitFor("the unreadable attachment to be unknown", func(m metrics) bool {
		return m["sriov_stable_check_errors_total"] >= 1 && m[attachments("unknown")] == 1
	})
	testutil.RenameIn(t, n.pods[0], "net1", "eth9")
	before = a.scrape()[sweeps]
	a.withinOneInterval("renamed drift beside an unreadable attachment", before, func(m metrics) bool { return m[drift("renamed")] == 1 })
	if d := a.scrape()["sriov_stable_last_sweep_duration_seconds"]; d > 0.5 {
		t.Errorf("a sweep with one unreadable attachment took %.3fs, want well within the 200ms interval", d)
	}
	testutil.RenameIn(t, n.pods[0], "eth9", "net1")
	unblock()
	a.waitFor("every attachment checkable and healthy again", func(m metrics) bool {
		return m[attachments("ok")] == 3 && m[drift("renamed")] == 0
	})

	// 4. A pod sandbox torn down without DEL: stale, then removed after the
	//    1s grace period.
	stalePath := n.rts[2].NetNS
	testutil.RemoveNetns(t, n.pods[2])
	a.waitFor("a stale attachment", func(m metrics) bool { return m[attachments("stale")] == 1 })
	a.waitFor("the stale record to be removed", func(m metrics) bool {
		return m["sriov_stable_stale_records_removed_total"] == 1 && m[attachments("stale")] == 0 && m[attachments("ok")] == 2
	})
	if recs, _ := filepath.Glob(filepath.Join(n.stateDir, "attachments", "*pod-2*")); len(recs) != 0 {
		t.Errorf("the stale record of %s is still there: %v", stalePath, recs)
	}

	// 5. DEL through libcni removes the attachment from the metrics.
	if err := n.chains[1].Del(n.rts[1]); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	a.waitFor("the deleted attachment to leave the metrics", func(m metrics) bool { return m[attachments("ok")] == 1 })

	// 6. The doctor's findings about the fixture node are gauges: it has no
	//    mlx5_core module loaded.
	m := a.scrape()
	if m[promtext.Series("sriov_stable_doctor_finding", "check", "driver-loaded", "severity", "error", "subject", "mlx5_core")] != 1 ||
		m["sriov_stable_doctor_up"] != 1 {
		t.Errorf("doctor gauges missing: %v", m)
	}

	// Each drift was counted once when it began
	// (sriov_stable_drift_events_total): the renames were two; the carrier
	// drop was one, and a rename may add more: the kernel renames only a
	// link that is down, so an event-driven check can see the VF without
	// carrier for that moment, which is true.
	m = a.scrape()
	for _, want := range []struct {
		reason string
		min    int
		max    int
	}{
		{"renamed", 2, 2},
		{"port-down", 1, 1 + 2*2},
	} {
		got := m[promtext.Series("sriov_stable_drift_events_total", "network", network, "reason", want.reason)]
		if got < float64(want.min) || got > float64(want.max) {
			t.Errorf("%v drifts with reason %s counted, want %d to %d", got, want.reason, want.min, want.max)
		}
	}

	checkDocumentedSeries(t, a)
}

// checkDocumentedSeries scrapes /metrics with curl, as an operator or
// Prometheus would, and checks that every sriov_stable_* series the docs
// name is served.
func checkDocumentedSeries(t *testing.T, a *agent) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "monitor.md"))
	if err != nil {
		t.Fatalf("read the documented metrics: %v", err)
	}
	documented := map[string]bool{}
	for _, f := range strings.FieldsFunc(string(doc), func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if strings.HasPrefix(f, "sriov_stable_") {
			documented[f] = true
		}
	}
	if len(documented) < 10 {
		t.Fatalf("the docs name only %d sriov_stable_* series", len(documented))
	}
	body := ""
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(curl, "-sSf", a.url+"/metrics").Output()
		if err != nil {
			t.Fatalf("curl /metrics: %v", err)
		}
		body = string(out)
	} else {
		t.Logf("no curl binary here (%v); scraping with net/http", err)
		_, body = a.get("/metrics")
	}
	served := map[string]bool{}
	for s := range promtext.Parse(body) {
		name, _, _ := strings.Cut(s, "{")
		served[name] = true
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("documented series %s is not served", name)
		}
	}
	for name := range served {
		if strings.HasPrefix(name, "sriov_stable_") && !documented[name] {
			t.Errorf("served series %s is not documented", name)
		}
	}
}
