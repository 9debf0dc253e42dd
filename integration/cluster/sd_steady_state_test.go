//go:build clustere2e

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// steadyWindow is how long scenario 13 watches the agent with nothing
// changing (issue 25: no changes for 5 minutes, 0 requests per minute).
const steadyWindow = 5 * time.Minute

// TestSDSteadyState (scenario 13): the shipped DaemonSet (doctor every 5
// minutes, the port watcher every second) on a node with one VF tainted
// and its condition False, and nothing changing for steadyWindow: the API
// server's own audit log, by the agent's service account and user agent,
// shows no request from it in that time but the renewals of its watches.
// Before the window the same log shows the agent's list, watch and writes,
// so the count is of a record that does see the agent.
func TestSDSteadyState(t *testing.T) {
	c := mustCluster(t)
	ds := c.ensureReporting(t, componentReporting, false)
	ctx := context.Background()
	res := c.Client.ResourceV1()
	broken, healthy := c.Node.ZeroGUID, c.Node.VFs[len(c.Node.VFs)-2]
	if err := c.publishVFs(ctx, broken, healthy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = res.ResourceSlices().Delete(ctx, draSlice, metav1.DeleteOptions{})
		_ = res.DeviceClasses().Delete(ctx, draDeviceClass, metav1.DeleteOptions{})
	})
	if _, err := c.waitDeviceTaints(ctx, map[string]string{deviceName(broken.PCI): "sriov-stable-cni.io/guid=invalid"}); err != nil {
		t.Fatal(err)
	}
	// The rule's create and its node event are written by now; what the
	// watches bring back of them settles within a second.
	time.Sleep(5 * time.Second)
	from := time.Now()
	time.Sleep(steadyWindow)
	to := time.Now()

	before, err := c.agentRequests(time.Time{}, from)
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.agentRequests(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.other) == 0 || len(before.watches) == 0 {
		t.Fatalf("the audit log has %d requests and %d watches of the agent before the window: it does not record the agent",
			len(before.other), len(before.watches))
	}
	minutes := to.Sub(from).Minutes()
	figf("13 steady state", fmt.Sprintf("agent's requests to the API server in %.0f s of no change (audit log)", to.Sub(from).Seconds()),
		"%d (%.1f/min) besides %d watch renewals; %d requests and %d watches before it", len(in.other),
		float64(len(in.other))/minutes, len(in.watches), len(before.other), len(before.watches))
	if len(in.other) > 0 {
		t.Errorf("the agent sent %d requests in a steady state of %.0f s, want none: %s", len(in.other), to.Sub(from).Seconds(),
			strings.Join(in.other[:min(len(in.other), 20)], "; "))
	}
	agentLogClean(t, ds)
}

// auditEntry is what scenario 13 reads of an audit event.
type auditEntry struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// agentCalls are the agent's requests of a time span.
type agentCalls struct {
	watches []string // watches started
	other   []string // every other request, completed
}

// agentRequests reads the API server's audit log for the requests the
// agent (its service account, its user agent) made from from to to.
func (c *cluster) agentRequests(from, to time.Time) (agentCalls, error) {
	var out agentCalls
	f, err := os.Open(c.AuditLog)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e auditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("%s: %w", c.AuditLog, err)
		}
		if e.User.Username != agentUser || !strings.Contains(e.UserAgent, "sriov-stable-agent") ||
			e.Received.Time.Before(from) || !e.Received.Time.Before(to) {
			continue
		}
		what := fmt.Sprintf("%s %s (%d)", e.Verb, e.RequestURI, e.ResponseStatus.Code)
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			out.watches = append(out.watches, what)
		case e.Verb != "watch" && e.Stage == "ResponseComplete":
			out.other = append(out.other, what)
		}
	}
	return out, sc.Err()
}
