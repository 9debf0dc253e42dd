// Package kubecluster brings up and tears down the single-node Kubernetes
// of the cluster e2e (integration/cluster, make cluster-e2e): a fixture DGX
// H200 node in private network, mount and PID namespaces, its PKI, etcd,
// containerd, the control plane, kubelet with the VF device plugin and
// kube-proxy, and the bookkeeping of processes, mounts and cgroups that
// proves nothing of a run is left. It knows no scenario: those are the
// cluster package's tests, which Run, Start and Teardown frame.
package kubecluster
