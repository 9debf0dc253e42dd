package kubecluster

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
)

// The components' configuration files, rendered without I/O: Start writes
// them, the unit tests read them.

// containerdConfig: the CRI with the run's runc, cgroupfs (cgroup v1 here),
// the local pause image, and CNI from the node's dirs.
func containerdConfig(binDir string) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %[1]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[2]q

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
  # Nothing on this machine may lower an oom_score_adj below its own: its
  # processes run without CAP_SYS_RESOURCE. kubelet asks -998 for every pod
  # sandbox, runc's nsexec fails to write it, and every sandbox fails with
  # "can't get final child's PID from pipe: EOF". Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[3]q
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[4]q]
    conf_dir = %[5]q
    max_conf_num = 1
`, containerdSocket, PauseImage, filepath.Join(binDir, "runc"), CNIBinDir, cniConfDir)
}

// auditPolicy records the requests of users at Metadata, one line per
// request when it completes (a watch also when it starts), and nothing of
// anyone else's.
func auditPolicy(users []string) (string, error) {
	list, err := json.Marshal(users)
	if err != nil {
		return "", err
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ` + string(list) + `
  - level: None
`, nil
}

// kubeletConfig: cgroup v1 allowed (this machine is hybrid), cgroupfs under
// cgroupRoot, no image GC or eviction of the tests' images, authentication
// by the cluster CA.
func kubeletConfig(caFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[4]s
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: [%[5]s]
resolvConf: %[6]s
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.inodesFree: "1%%"
localStorageCapacityIsolation: false
serializeImagePulls: false
`, cgroupRoot, containerdSocket, NodeIP, caFile, serviceIP(10), filepath.Join(runDir, "resolv.conf"))
}

// kubeProxyConfig: nftables mode (this kernel has nf_tables built in;
// Debian's nft, which it runs, comes from run.sh's packages), its rules in
// the run's network namespace like everything else. Nothing outside that
// namespace is touched: conntrack limits and timeouts are left as they are
// (maxPerCore 0, min 0, zero timeouts: the nf_conntrack hash size is
// global to the host), no oom_score_adj is asked for (this machine's
// processes cannot lower theirs), and health and metrics listen on
// loopback.
func kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, NodeName, NodeIP, podSubnet)
}

// multusConfig is the runtime's network configuration: the Multus thin
// plugin with the kubeconfig, delegating the pod network to bridge +
// host-local.
func multusConfig(kubeconfig, logDir string) ([]byte, error) {
	podNet := map[string]any{
		"cniVersion": "1.0.0", "name": "e2e-pods",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
			// A default route via the bridge: pods reach the node IP (the
			// reporting monitor of issue 17 talks to the API server there).
			"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": podSubnet}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}},
		}},
	}
	multus := map[string]any{
		"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
		"kubeconfig": kubeconfig, "binDir": CNIBinDir, "cniDir": "/var/lib/cni/multus",
		"logFile": filepath.Join(logDir, "multus.log"), "logLevel": "verbose",
		"delegates": []any{podNet},
	}
	return json.MarshalIndent(multus, "", "  ")
}

// firstServiceIP is the kubernetes Service's ClusterIP: the first address
// of the service range.
func firstServiceIP() net.IP {
	_, n, _ := net.ParseCIDR(serviceCIDR)
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1)
}

// serviceIP is the i-th address of the service range.
func serviceIP(i byte) string {
	ip := firstServiceIP().To4()
	return fmt.Sprintf("%d.%d.%d.%d", ip[0], ip[1], ip[2], ip[3]-1+i)
}
