//go:build clustere2e

package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
)

var (
	binDir      = flag.String("cluster.bin", "", "directory with every binary build.sh built (required)")
	workDir     = flag.String("cluster.work", "", "this run's directory: logs, the pod logs of /var/log (required)")
	imageDir    = flag.String("cluster.images", "", "directory with the make image outputs (binaries and archive) of version a and version b in a/ and b/ (required)")
	imageName   = flag.String("cluster.image", "ghcr.io/sriov-stable-cni/sriov-stable-cni", "name of the project image in the archives")
	versionA    = flag.String("cluster.version-a", "", "version (and tag) of image-a.tar, the one first deployed (required)")
	versionB    = flag.String("cluster.version-b", "", "version (and tag) of image-b.tar, the upgrade (required)")
	nadCRD      = flag.String("cluster.nad-crd", "", "the NetworkAttachmentDefinition CRD (network-attachment-definition-client's artifacts/networks-crd.yaml) (required)")
	repoRoot    = flag.String("cluster.repo", defaultRepoRoot(), "the repository (for deploy/daemonset)")
	churnCycles = flag.Int("cluster.churn-cycles", 100, "pod create/delete cycles of the churn scenario")
	latencyPods = flag.Int("cluster.latency-pods", 20, "pods per NAD in the pod start latency figure")
)

func defaultRepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestMain runs the scenarios inside the cluster's namespaces
// (kubecluster.Run re-executes the binary there, and checks the host once
// they are gone); in there, runCluster starts the cluster, runs the
// scenarios and tears the cluster down.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := checkFlags(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		os.Exit(2)
	}
	os.Exit(kubecluster.Run(clusterConfig(), func() int { return runCluster(m) }))
}

func checkFlags() error {
	var missing []string
	for name, v := range map[string]string{"cluster.bin": *binDir, "cluster.work": *workDir, "cluster.images": *imageDir,
		"cluster.version-a": *versionA, "cluster.version-b": *versionB, "cluster.nad-crd": *nadCRD, "cluster.helm": *helmBin} {
		if v == "" {
			missing = append(missing, "-"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (integration/cluster/run.sh passes them)", strings.Join(missing, ", "))
	}
	if *versionA == *versionB {
		return fmt.Errorf("-cluster.version-a and -cluster.version-b are both %q: the upgrade needs two versions", *versionA)
	}
	return nil
}

// clusterConfig is the cluster the flags describe: both project images
// imported, the agent's requests audited (scenario 13 counts them).
func clusterConfig() kubecluster.Config {
	return kubecluster.Config{BinDir: *binDir, WorkDir: *workDir, Images: []string{imageArchive("a"), imageArchive("b")},
		NADCRD: *nadCRD, AuditUsers: []string{agentUser}, Progress: os.Stdout}
}

// imageArchive is the project image of make image in images/<which>
// (a, the version first deployed, or b, the upgrade).
func imageArchive(which string) string {
	return filepath.Join(*imageDir, which, "sriov-stable-cni-image.tar")
}

// imageRef is the project image of a version, as make image tags it.
func imageRef(version string) string { return *imageName + ":" + version }

// cluster is the run's cluster with what the scenarios keep of it.
type cluster struct {
	*kubecluster.Cluster
	kubeletRestart restartWindow // scenario 5's kubelet restart
	runtimeLeaks   int           // pod netns containerd leaked in its restart (checkNodeClean)
}

var theCluster *cluster

// mustCluster returns the cluster, failing the test when it is not up.
func mustCluster(t *testing.T) *cluster {
	t.Helper()
	if theCluster == nil {
		t.Fatal("the cluster is not up")
	}
	return theCluster
}

// runCluster is the run stage: the cluster up, the scenarios -test.run
// selects, then the teardown and its checks whatever they selected and
// however they ended. A failed teardown fails the run even when every
// scenario passed.
func runCluster(m *testing.M) int {
	start := time.Now()
	c, err := kubecluster.Start(clusterConfig())
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: %v\n", err)
		return 1
	}
	theCluster = &cluster{Cluster: c}
	figf("cluster", "up (etcd, containerd, control plane, kubelet, node Ready, images imported)", "%.1f s", time.Since(start).Seconds())
	code := m.Run()
	if err := theCluster.teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster e2e: TEARDOWN FAILED (the run fails whatever the tests above said):\n%v\n", err)
		code = 1
	}
	figf("cluster", "whole run inside the namespaces", "%.1f s", time.Since(start).Seconds())
	printFigures()
	return code
}

// teardown runs after the scenarios: it deletes every pod and checks the
// node is as it was (every VF home, no record), then tears the cluster
// down (kubecluster's Teardown: every component stopped, no process left
// but shims, which it kills, cgroups removed) and prints its figures. It
// returns every failure. The host side (no mount, namespace or process
// left) is checked by kubecluster.Run on the host once the namespaces are
// gone.
func (c *cluster) teardown() error {
	start := time.Now()
	var errs []error
	if err := c.DeleteAllPods(context.Background()); err != nil {
		errs = append(errs, err)
	}
	if missing := c.Node.VFsHome(); len(missing) > 0 {
		errs = append(errs, fmt.Errorf("VFs not back on the node under their host name after every pod was deleted: %s", strings.Join(missing, ", ")))
	}
	if recs, err := attachmentRecords(); err != nil {
		errs = append(errs, err)
	} else if len(recs) > 0 {
		errs = append(errs, fmt.Errorf("%d attachment records left after every pod was deleted: %v", len(recs), recs))
	}
	left, err := c.Teardown()
	errs = append(errs, err)
	// Every pod was torn down by kubelet (a pod whose sandbox DEL failed
	// would still be there, above). A shim may still outlive containerd:
	// kubelet restarted mid-churn while it started a pod can lose a
	// container it made (containerd logs the sandbox's shim as gone while
	// its process runs on). Teardown killed such shims and their
	// containers, and they are counted here; any other process that
	// outlived the cluster failed it. The host check after the run proves
	// none is left.
	figf("teardown", "shims outliving containerd (killed)", "%d %s", len(left.Shims), left.Shims)
	figf("teardown", "their containers' processes (killed)", "%d", len(left.Containers))
	figf("teardown", "pods deleted, cluster stopped, cgroups removed", "%.1f s", time.Since(start).Seconds())
	return errors.Join(errs...)
}

// stateDir is the plugin's default state directory, which the DaemonSet's
// monitor reads.
const stateDir = "/run/cni/sriov-stable"

// attachmentRecords lists the plugin's attachment records on the node.
func attachmentRecords() ([]string, error) {
	return filepath.Glob(filepath.Join(stateDir, "attachments", "*.json"))
}

// records is attachmentRecords for a test.
func records(t testing.TB) []string {
	t.Helper()
	m, err := attachmentRecords()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
