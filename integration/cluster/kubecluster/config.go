package kubecluster

import "io"

// Config is what a run tells the cluster.
type Config struct {
	// BinDir holds every binary build.sh built: the components, the CNI
	// plugins the node runs, the device plugin, pause.
	BinDir string
	// WorkDir is the run's directory on the host: logs/ (every
	// component's log), var-log/ (bind-mounted over the node's /var/log),
	// the namespaces the host check looks for.
	WorkDir string
	// Images are image archives imported into containerd besides the
	// pause image; nothing is ever pulled.
	Images []string
	// NADCRD is the NetworkAttachmentDefinition CRD's manifest
	// (network-attachment-definition-client's artifacts/networks-crd.yaml).
	NADCRD string
	// AuditUsers are the users whose requests the API server's audit log
	// (Cluster.AuditLog) records, at Metadata; nobody else's are.
	AuditUsers []string
	// Progress gets a line per start-up step and the teardown's kill
	// notice (nil: discarded).
	Progress io.Writer
}

// The node's names and addresses, all inside the run's network namespace:
// the node IP (on lo: kubelet wants a node IP that is not a loopback
// address), the pod network behind the bridge, and the service range
// (routed to lo; kube-proxy translates the kubernetes Service's
// ClusterIP). Documentation and benchmarking ranges, so they cannot collide
// with anything real.
const (
	NodeName    = "sriov-e2e-node"
	NodeIP      = "192.0.2.10"
	podSubnet   = "198.18.0.0/24"
	serviceCIDR = "198.19.0.0/24"
)

// Paths of the node, all private to the run's mount namespace.
const (
	// runDir holds the cluster's own files: PKI, configurations, the
	// fixture sysfs, etcd's data (tmpfs, in the run's mount namespace).
	runDir           = "/run/sriov-e2e"
	containerdSocket = "/run/containerd/containerd.sock"
	// CNIBinDir is the node's CNI bin dir, where the DaemonSet installs
	// the plugin next to the upstream ones.
	CNIBinDir  = "/opt/cni/bin"
	cniConfDir = runDir + "/net.d"
)

// Namespace holds the tests' pods and NADs; Start creates it.
const Namespace = "e2e"

// The extended resources the device plugin advertises: every VF of the
// fixture but one, and the one with a zero GUID (Node.ZeroGUID) on its own.
const (
	ResourceVF       = "sriov-stable-cni.io/ibvf"
	ResourceZeroGUID = "sriov-stable-cni.io/ibvf-zero-guid"
)

// cgroupRoot is the cgroup (in every v1 hierarchy and in the unified one)
// under which kubelet puts its pods: created before kubelet starts and
// removed at teardown, cgroups being the one thing of the run that is not
// in its namespaces.
const cgroupRoot = "sriov-stable-e2e"

// namespacesFile, in the work dir, holds the run stage's namespace links
// (net:[…], mnt:[…], pid:[…]) for the host check.
const namespacesFile = "namespaces"
