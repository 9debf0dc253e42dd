// Package cluster is the cluster e2e (make cluster-e2e): a single-node
// Kubernetes built here from source runs inside private network, mount and
// PID namespaces on a fixture DGX H200 node (fixture sysfs bind-mounted over
// /sys, veth stand-ins for the VFs), and its tests drive the path a user
// runs: the installer DaemonSet from deploy/daemonset, NetworkAttachment
// Definitions read by the Multus thin plugin, VFs allocated by kubelet
// through a device plugin, containerd calling the chain.
//
// Package kubecluster brings the cluster up and down; this package holds
// the scenarios alone, as tests. TestMain starts the cluster, runs them,
// then always tears the cluster down and checks the teardown (every pod
// deleted, every VF home, no record, no process left but containerd's
// shims, cgroups removed), whichever scenarios -test.run selected: a failed
// teardown fails the run even when every scenario passed.
//
// The scenarios depend on their order: each is a test TestS<n>… in a file
// s<n>_…_test.go, n being 0 to 9 and then a to d for scenarios 10 to 13,
// and go test runs tests in the order of their files' names (then of their
// declarations). Later scenarios go on from what earlier ones left: the
// DaemonSet scenario 1 deploys, scenario 2's pods that scenario 3 renames
// and deletes, the reporting component and doctor interval the previous
// scenario rolled out. Run alone, a scenario sets up what it needs (the
// DaemonSet, the NADs, scenario 2's pods); scenario 1 fails if anything
// deployed the DaemonSet before it. A new scenario takes the next name in
// that order (se_…, TestSE…).
//
// The tests carry the build tag clustere2e so that `go test ./...` never
// starts a cluster; run.sh builds everything and runs them (docs/cluster-e2e.md).
package cluster
