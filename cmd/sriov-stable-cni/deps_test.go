package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraphIsLean keeps the packages that slow every pod attach
// (measured: ~6 ms for Prometheus, ~7 ms for the Kubernetes/NAD types, per
// exec) out of the CNI binary. The agent and the tests may use them.
func TestImportGraphIsLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"k8s.io/", "sigs.k8s.io/", "github.com/prometheus/", "github.com/google/go-containerregistry",
		"github.com/k8snetworkplumbingwg/", "google.golang.org/protobuf", "google.golang.org/grpc",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned too few packages to judge: %v", deps)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("the CNI binary imports %s; keep it in the agent or in tests", dep)
			}
		}
	}
}
