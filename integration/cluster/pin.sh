#!/usr/bin/env bash
# Writes the tools modules of the cluster e2e from versions.env: after
# changing a version there, run
#   integration/cluster/pin.sh
# and commit tools/{kubernetes,kubectl,kube-proxy,etcd,containerd,runc}/go.{mod,sum}. Each is
# its own module so that no component drags another's (or the project's)
# dependency versions. CNI plugins and Multus are pinned by the project's
# go.mod and tools/multus; build.sh checks them against versions.env.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"

GO_VERSION=$(go env GOVERSION)
GO_VERSION=${GO_VERSION#go}

# new_module DIR WHAT starts DIR/go.mod afresh with a comment saying what
# it builds.
new_module() {
	local dir=$ROOT/tools/$1
	mkdir -p "$dir"
	rm -f "$dir/go.sum"
	cat >"$dir/go.mod" <<EOF
// $2, for the cluster e2e
// (integration/cluster), pinned in integration/cluster/versions.env and
// written by integration/cluster/pin.sh: edit the version there, not here.
module github.com/sriov-stable-cni/sriov-stable-cni/tools/$1

go $GO_VERSION
EOF
}

# tools DIR PACKAGE@VERSION... records the packages as tools and tidies.
tools() {
	local dir=$ROOT/tools/$1
	shift
	(cd "$dir" && go get -tool "$@" && go mod tidy)
}

# kubernetes_module DIR WHAT PACKAGE... writes tools/DIR: a module that
# requires k8s.io/kubernetes with each of its staging modules replaced by
# its v0 twin, and builds PACKAGEs of it.
kubernetes_module() {
	local dir=$1 what=$2 gomod staging=() m args=()
	shift 2
	gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$gomod" ] || { echo "pin: cannot download k8s.io/kubernetes@$KUBERNETES" >&2; exit 1; }
	mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod")
	new_module "$dir" "$what of
// Kubernetes $KUBERNETES, its ${#staging[@]} staging modules at their v0 twins"
	for m in "${staging[@]}"; do args+=("-replace=$m=$m@v0.${KUBERNETES#v1.}"); done
	(cd "$ROOT/tools/$dir" && go mod edit "-require=k8s.io/kubernetes@$KUBERNETES" "${args[@]}")
	tools "$dir" "$@"
}

pin_kubernetes() {
	kubernetes_module kubernetes "kube-apiserver, kube-controller-manager, kube-scheduler and kubelet" \
		k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet}
}

# kubectl gets a module of its own, so that adding it changed nothing of the
# control plane's (whose build is cached by its go.mod and go.sum).
pin_kubectl() {
	kubernetes_module kubectl "kubectl (the e2e prints what an operator sees with it)" k8s.io/kubernetes/cmd/kubectl
}

# kube-proxy too: the e2e's pods reach the API server through the
# kubernetes Service's ClusterIP, as the agent's in-cluster client does on a
# real node.
pin_kube_proxy() {
	kubernetes_module kube-proxy "kube-proxy (the kubernetes Service's ClusterIP in the e2e's netns)" \
		k8s.io/kubernetes/cmd/kube-proxy
}

main() {
	pin_kubernetes
	pin_kubectl
	pin_kube_proxy
	new_module etcd "etcd $ETCD"
	tools etcd "go.etcd.io/etcd/server/v3@$ETCD"
	new_module containerd "containerd, ctr and containerd-shim-runc-v2 $CONTAINERD"
	tools containerd github.com/containerd/containerd/v2/cmd/{containerd,ctr,containerd-shim-runc-v2}@"$CONTAINERD"
	new_module runc "runc $RUNC"
	tools runc "github.com/opencontainers/runc@$RUNC"
}

main "$@"
