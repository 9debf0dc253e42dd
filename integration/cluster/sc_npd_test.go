//go:build clustere2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

// TestSCNPDRule (scenario 12) runs deploy/node-problem-detector's monitor
// config on the node as node-problem-detector's custom plugin monitor
// would (NPD itself is not served by the module proxy here): the init
// container's install of the agent from image a into the rule's directory,
// then the rule's command with its arguments and timeout, on a healthy
// node and with a zero GUID.
// NPD maps exit 0 to the condition False, 1 to True, anything else to
// Unknown, and keeps max_output_length bytes of the output.
func TestSCNPDRule(t *testing.T) {
	c := mustCluster(t)
	data, err := os.ReadFile(filepath.Join(*repoRoot, "deploy", "node-problem-detector", "sriov-stable-doctor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		PluginConfig struct {
			MaxOutputLength int `json:"max_output_length"`
		} `json:"pluginConfig"`
		Rules []struct {
			Condition, Reason, Path, Timeout string
			Args                             []string
		} `json:"rules"`
	}
	if err := json.Unmarshal(data, &conf); err != nil || len(conf.Rules) != 1 {
		t.Fatalf("sriov-stable-doctor.json: %v, %d rules, want 1", err, len(conf.Rules))
	}
	rule := conf.Rules[0]
	timeout, err := time.ParseDuration(rule.Timeout)
	if err != nil {
		t.Fatalf("rule timeout %q: %v", rule.Timeout, err)
	}

	// The init container of npd-daemonset-patch.yaml, on the node, into
	// the directory its emptyDir volume makes.
	dir := filepath.Dir(rule.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	install := exec.Command(filepath.Join(*imageDir, "a", "sriov-stable-agent"), "install", "--dir", dir)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", install.Args, err, out)
	}

	run := func(what string, wantCode int, wantSays string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, rule.Path, rule.Args...).Output()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("%s %v: %v", rule.Path, rule.Args, err)
		}
		msg := strings.TrimSuffix(string(out), "\n")
		figf("c NPD rule", what, "exit %d in %d ms: %q", code, time.Since(start).Milliseconds(), msg)
		if code != wantCode {
			t.Errorf("%s: exit %d, want %d: %q", what, code, wantCode, msg)
		}
		if len(msg) > conf.PluginConfig.MaxOutputLength {
			t.Errorf("%s: %d bytes of output, over max_output_length %d: %q", what, len(msg), conf.PluginConfig.MaxOutputLength, msg)
		}
		if !strings.Contains(msg, wantSays) {
			t.Errorf("%s: output %q does not say %q", what, msg, wantSays)
		}
	}

	vf := c.Node.ZeroGUID
	c.Node.SetGUID(vf, vf.NodeGUID)
	t.Cleanup(func() { c.Node.SetGUID(vf, kubecluster.UnsetGUID) })
	run("healthy node (condition "+rule.Condition+" False)", 0, "healthy")
	c.Node.SetGUID(vf, kubecluster.UnsetGUID)
	run("zero GUID on "+vf.PCI+" (condition True, reason "+rule.Reason+")", 1, vf.PCI)
}
