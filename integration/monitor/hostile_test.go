package monitor_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/promexport"
)

// shipped is what the DaemonSet gives the monitor container: its grace
// period and memory limit, read from deploy/.
type shipped struct {
	grace       time.Duration
	memoryLimit int64 // bytes
}

func readShipped(t *testing.T) shipped {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	deploy := filepath.Join(filepath.Dir(file), "..", "..", "deploy")
	var base, patch appsv1.DaemonSet
	for path, ds := range map[string]*appsv1.DaemonSet{
		filepath.Join(deploy, "daemonset", "daemonset.yaml"):     &base,
		filepath.Join(deploy, "monitor", "daemonset-patch.yaml"): &patch,
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, ds); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var s shipped
	if g := base.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		s.grace = time.Duration(*g) * time.Second
	}
	for _, c := range patch.Spec.Template.Spec.Containers {
		if c.Name == "monitor" {
			s.memoryLimit = c.Resources.Limits.Memory().Value()
		}
	}
	if s.grace == 0 || s.memoryLimit == 0 {
		t.Fatalf("deploy/ gives the monitor no grace period or memory limit: %+v", s)
	}
	return s
}

// A port-state read that never returns stops that VF's checks only: the
// agent goes on checking the others (a rename elsewhere is seen within an
// interval), /healthz answers 200 and names the VF, and SIGTERM ends the
// agent within the DaemonSet's grace period although a goroutine of the
// check and one of the doctor are blocked in the read.
func TestAgentBesideAStuckPortRead(t *testing.T) {
	want := readShipped(t)
	n := newNode(t, 3)
	for i := range 3 {
		n.attach(i)
	}
	safefiletest.FIFOAt(t, filepath.Join(n.sys.DevicePath(testutil.VFAddr(rdmaVF)), "infiniband", "mlx5_11", "ports", "1", "state"), true)
	a := startAgent(t, n)
	a.waitFor("two healthy attachments beside the stuck one", func(m metrics) bool {
		return m[attachments("ok")] == 2 && m[attachments("unknown")] == 1
	})

	testutil.RenameIn(t, n.pods[0], "net1", "eth9")
	before := a.scrape()[sweeps]
	a.withinOneInterval("a rename beside the stuck VF", before, func(m metrics) bool { return m[drift("renamed")] == 1 })

	code, body := a.get("/healthz")
	named := strings.Contains(body, "\nstuck: VF "+testutil.VFAddr(rdmaVF)+" ") || strings.Contains(body, "\nunchecked: VF "+testutil.VFAddr(rdmaVF)+" ")
	if code != http.StatusOK || !strings.HasPrefix(body, "ok\n") || !named {
		t.Errorf("/healthz: %d\n%s\nwant 200, ok, and a line naming VF %s", code, body, testutil.VFAddr(rdmaVF))
	}
	t.Logf("/healthz:\n%s", body)

	took := a.terminate(want.grace)
	t.Logf("SIGTERM to exit: %s (grace period %s)", took.Round(time.Millisecond), want.grace)
}

// procStatus reads a field of /proc/<pid>/status in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// sockets counts the open sockets of process pid.
func sockets(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

// 8,000 idle clients on the metrics port (half between keep-alive
// requests, half connected without a word) leave the agent's peak RSS
// within the DaemonSet's memory limit and its open sockets within its
// connection cap, and /healthz and /metrics answer a new client beside
// them.
func TestAgentBesideIdleClients(t *testing.T) {
	const clients = 8000
	want := readShipped(t)
	n := newNode(t, 1)
	n.attach(0)
	a := startAgent(t, n)
	a.waitFor("the attachment checked", func(m metrics) bool { return m[attachments("ok")] == 1 })
	base := procStatus(t, a.pid, "VmRSS")

	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	answered := 0
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < clients; i += 16 {
				c, err := net.DialTimeout("tcp", listen, 5*time.Second)
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				if i%2 == 1 {
					continue // connected, says nothing
				}
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", listen)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				// A client evicted before its answer gets end of file: the
				// cap made room for a newer one.
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					resp.Body.Close()
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	start := time.Now()
	code, body := a.get("/healthz")
	took := time.Since(start)
	if code != http.StatusOK || !strings.HasPrefix(body, "ok\n") {
		t.Errorf("/healthz beside %d idle clients: %d %q", clients, code, body)
	}
	if code, _ := a.get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics beside %d idle clients: %d", clients, code)
	}
	rss, peak, socks := procStatus(t, a.pid, "VmRSS"), procStatus(t, a.pid, "VmHWM"), sockets(t, a.pid)
	t.Logf("%d idle clients (%d answered before going idle): agent RSS %d MiB (%d MiB before them), peak %d MiB, limit %d MiB; %d open sockets; /healthz answered in %s",
		clients, answered, rss>>20, base>>20, peak>>20, want.memoryLimit>>20, socks, took.Round(time.Millisecond))
	if peak > want.memoryLimit {
		t.Errorf("the agent's peak RSS %d MiB exceeds the DaemonSet's memory limit %d MiB", peak>>20, want.memoryLimit>>20)
	}
	if limit := promexport.DefaultMaxConns + 16; socks > limit { // the listener and the netlink sockets besides
		t.Errorf("the agent has %d sockets open, want at most %d (its connection cap and its own)", socks, limit)
	}
}
