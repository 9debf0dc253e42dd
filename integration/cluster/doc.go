// Package cluster is the cluster e2e (make cluster-e2e): a single-node
// Kubernetes built here from source runs inside private network, mount and
// PID namespaces on a fixture DGX H200 node (fixture sysfs bind-mounted over
// /sys, veth stand-ins for the VFs), and its tests drive the path a user
// runs: the installer DaemonSet from deploy/daemonset, NetworkAttachment
// Definitions read by the Multus thin plugin, VFs allocated by kubelet
// through a device plugin, containerd calling the chain.
//
// The tests carry the build tag clustere2e so that `go test ./...` never
// starts a cluster; run.sh builds everything and runs them (docs/cluster-e2e.md).
package cluster
