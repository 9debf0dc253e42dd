package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraphIsLean keeps packages that slow every pod attach out of the
// CNI binary: the runtime execs it for every verb of every attachment, and
// each package's init runs every time. The agent and the tests may use them.
func TestImportGraphIsLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/sriov-stable-cni/sriov-stable-cni/"
	forbidden := []struct{ prefix, why string }{
		{"k8s.io/", "Kubernetes/NAD types: measured ~7 ms per exec"},
		{"sigs.k8s.io/", "Kubernetes/NAD types: measured ~7 ms per exec"},
		{"github.com/k8snetworkplumbingwg/", "Kubernetes/NAD types: measured ~7 ms per exec"},
		{"github.com/prometheus/", "client_golang: measured ~6 ms per exec; metrics are the agent's"},
		{"github.com/google/go-containerregistry", "the image builder's (tools/mkimage), not the plugin's"},
		{"google.golang.org/protobuf", "comes with client_golang and the Kubernetes types; registers descriptors at init"},
		{"google.golang.org/grpc", "a large init the plugin has no use for"},
		{"go.yaml.in/yaml", "the hostconfig spec parser: its package init alone measured ~0.22 ms per exec"},
		{mod + "pkg/doctor", "an operator command: sriov-stable-agent doctor"},
		{mod + "pkg/hostconfig", "an operator command: sriov-stable-agent hostconfig (and it pulls in YAML)"},
		{mod + "pkg/monitor", "the agent's drift monitor (and it pulls in Prometheus)"},
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned too few packages to judge: %v", deps)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f.prefix) {
				t.Errorf("the CNI binary imports %s (%s); keep it in the agent or in tests", dep, f.why)
			}
		}
	}
}
