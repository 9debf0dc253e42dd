//go:build labguest

package guest

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

var (
	binDir  = flag.String("lab.bin", "/opt/cni/bin", "directory holding host-device, sriov-stable-cni and multus")
	workDir = flag.String("lab.work", "/tmp/lab", "directory for per-scenario state, caches and plugin logs (kept as artifacts)")
	numVFs  = flag.Int("lab.vfs", 7, "VFs to create on every PF")
	// crashBin holds sriov-stable-cni built with the crashpoints tag
	// (internal/crashpoint): TestLab16CrashAfterAltNameAdded runs it.
	crashBin = flag.String("lab.crashbin", "", "directory holding sriov-stable-cni built with -tags crashpoints")
	// soakCycles is set by run.sh from LAB_SOAK_CYCLES (make lab-soak: 200).
	soakCycles = flag.Int("lab.soak-cycles", 40, "ADD/CHECK/DEL cycles of TestLab13RealVFSoak")
)

// theLab is discovered once, before any scenario runs, and only read after.
var theLab *lab

func TestMain(m *testing.M) {
	flag.Parse()
	// The Multus thin plugin must not look for a Kubernetes API server.
	os.Unsetenv("KUBERNETES_SERVICE_HOST")
	os.Unsetenv("KUBERNETES_SERVICE_PORT")
	// Each scenario's stateDir and logFile are under -lab.work, outside the
	// plugin's default roots: allow it as a node administrator would, in
	// the environment libcni (and the Multus thin plugin) hand the plugin.
	// The lab reads the real sysfs at /sys, a default root.
	os.Setenv(config.AllowedRootsEnv, *workDir)
	start := time.Now()
	l, err := setUpLab(*numVFs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab setup failed: %v\n", err)
		os.Exit(1)
	}
	theLab = l
	fmt.Printf("lab: %s in %.1fs\n", l, time.Since(start).Seconds())
	os.Exit(m.Run())
}
