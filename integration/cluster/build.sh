#!/usr/bin/env bash
# Builds every binary the cluster e2e runs, at the versions of versions.env,
# and puts them in one directory (the argument). The upstream components are
# built from their tools modules (tools/kubernetes, tools/etcd,
# tools/containerd, tools/runc, tools/multus, tools/kubectl, tools/kube-proxy) and cached outside the repo under
# a key of the module's go.mod and go.sum, the build flags and the Go
# version, so a second run builds nothing of theirs; the project's own
# binaries and the CNI plugins are built from the project's module (the Go
# build cache makes that fast).
#
#   integration/cluster/build.sh OUT_DIR [COMPONENT...]
#
# COMPONENT is one of project multus runc containerd etcd kubernetes kubectl
# kube-proxy (default: all of them).
# Environment: CLUSTER_CACHE (default /var/cache/sriov-stable-cluster).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${CLUSTER_CACHE:-/var/cache/sriov-stable-cluster}
OUT=${1:?usage: build.sh OUT_DIR}

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=versions.env
. "$HERE/versions.env"

# module_version prints the version of module $2 selected by the module in
# directory $1.
module_version() {
	(cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# check_pins fails unless every module builds exactly the versions.env pins.
check_pins() {
	local dir mod want got line
	while read -r dir mod want; do
		got=$(module_version "$ROOT/$dir" "$mod") || die "go list -m $mod in $dir failed"
		[ "$got" = "$want" ] || die "$dir selects $mod $got but versions.env pins $want (run integration/cluster/pin.sh)"
	done <<EOF
tools/kubernetes k8s.io/kubernetes $KUBERNETES
tools/kubectl k8s.io/kubernetes $KUBERNETES
tools/kube-proxy k8s.io/kubernetes $KUBERNETES
tools/etcd go.etcd.io/etcd/server/v3 $ETCD
tools/containerd github.com/containerd/containerd/v2 $CONTAINERD
tools/runc github.com/opencontainers/runc $RUNC
tools/multus gopkg.in/k8snetworkplumbingwg/multus-cni.v4 $MULTUS
. github.com/containernetworking/plugins $CNI_PLUGINS
EOF
	# Every staging module of Kubernetes at its v0.<minor>.<patch> twin.
	want="v0.${KUBERNETES#v1.}"
	for dir in tools/kubernetes tools/kubectl tools/kube-proxy; do
		while read -r line; do
			case $line in *" => "*) ;; *) continue ;; esac
			got=${line##* }
			[ "$got" = "$want" ] || die "$dir replaces ${line%% *} with $got, not $want (run integration/cluster/pin.sh)"
		done < <(cd "$ROOT/$dir" && go mod edit -json | awk -F'"' '/"Old"/ { p = $8 } /"New"/ { getline; getline; print p " => " $4 }')
	done
}

# cached NAME MODULE_DIR FLAGS... -- PACKAGES... builds PACKAGES in
# MODULE_DIR with `go build FLAGS` into the cache (once per key) and links
# the results into OUT.
cached() {
	local name=$1 dir=$ROOT/$2 flags=() pkgs=() key dst t0 f lock
	shift 2
	while [ "$1" != -- ]; do flags+=("$1"); shift; done
	shift
	pkgs=("$@")
	key=$( { cat "$dir/go.mod" "$dir/go.sum"; go version; printf '%s\n' "${flags[@]}" "${pkgs[@]}" "${CGO_ENABLED:-}"; } |
		sha256sum | cut -c1-16)
	dst=$CACHE/$name-$key
	# One builder per component at a time: make test builds the components
	# in the background while other suites run, and make cluster-e2e may
	# start before that build is done; the second waits, then finds it.
	exec {lock}>"$CACHE/$name.lock"
	flock "$lock"
	if [ ! -e "$dst/.complete" ]; then
		say "building $name (cached afterwards in $dst)"
		t0=$SECONDS
		rm -rf "$dst.tmp" && mkdir -p "$dst.tmp"
		(cd "$dir" && go build -trimpath "${flags[@]}" -o "$dst.tmp/" "${pkgs[@]}") || die "building $name failed"
		touch "$dst.tmp/.complete"
		rm -rf "$dst" && mv "$dst.tmp" "$dst"
		say "built $name in $((SECONDS - t0))s"
		# Older builds of the component (other versions or keys) go.
		for f in "$CACHE/${name%-*}"-*; do
			case $f in "$dst" | *.lock) ;; *) rm -rf "$f" ;; esac
		done
	fi
	exec {lock}>&-
	for f in "$dst"/*; do ln -sf "$f" "$OUT/"; done
}

# kube_ldflags prints the link flags of the Kubernetes binaries: what
# hack/lib/version.sh stamps, so the node and the servers report the
# release (version skew checks read it).
kube_ldflags() {
	local v=${KUBERNETES#v} x=() p
	local minor=${v#*.}
	minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		x+=("-X $p.gitVersion=$KUBERNETES" "-X $p.gitMajor=1" "-X $p.gitMinor=$minor" "-X $p.gitTreeState=clean"
			"-X $p.buildDate=1970-01-01T00:00:00Z")
	done
	printf '%s' "-s -w ${x[*]}"
}

build_kubernetes() {
	local pkg=k8s.io/kubernetes/cmd
	CGO_ENABLED=0 cached kubernetes-$KUBERNETES tools/kubernetes -ldflags "$(kube_ldflags)" -- \
		$pkg/kube-apiserver $pkg/kube-controller-manager $pkg/kube-scheduler $pkg/kubelet
}

# kubectl, from a module of its own (a change to it rebuilds nothing of
# the control plane): the scenarios of issue 17 print what an operator sees.
build_kubectl() {
	CGO_ENABLED=0 cached kubectl-$KUBERNETES tools/kubectl -ldflags "$(kube_ldflags)" -- k8s.io/kubernetes/cmd/kubectl
}

# kube-proxy, from a module of its own like kubectl: the kubernetes
# Service's ClusterIP, which the agent's in-cluster client dials, is
# translated by its nftables rules in the e2e's network namespace.
build_kube_proxy() {
	CGO_ENABLED=0 cached kube-proxy-$KUBERNETES tools/kube-proxy -ldflags "$(kube_ldflags)" -- k8s.io/kubernetes/cmd/kube-proxy
}

build_etcd() {
	CGO_ENABLED=0 cached etcd-$ETCD tools/etcd -ldflags "-s -w" -- go.etcd.io/etcd/server/v3
	# go build names it after the package path's last element before /v3.
	ln -sfn "$(readlink "$OUT/server")" "$OUT/etcd" && rm -f "$OUT/server"
}

build_containerd() {
	local pkg=github.com/containerd/containerd/v2
	CGO_ENABLED=0 cached containerd-$CONTAINERD tools/containerd -tags "no_btrfs no_devmapper no_zfs no_aufs" \
		-ldflags "-s -w -X $pkg/version.Version=$CONTAINERD -X $pkg/version.Package=$pkg" -- \
		$pkg/cmd/containerd $pkg/cmd/ctr $pkg/cmd/containerd-shim-runc-v2
}

# runc needs cgo (its nsenter part is C) and libseccomp for seccomp
# profiles (RuntimeDefault).
build_runc() {
	CGO_ENABLED=1 cached runc-$RUNC tools/runc -tags "seccomp urfave_cli_no_docs" \
		-ldflags "-X main.version=${RUNC#v}" -- github.com/opencontainers/runc
}

build_multus() {
	CGO_ENABLED=0 cached multus-$MULTUS tools/multus -ldflags "-s -w" -- gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus
}

# build_project builds the CNI plugins the node runs (from the project's
# go.mod), the project's binaries and the e2e's own programs.
build_project() {
	local plugins=github.com/containernetworking/plugins/plugins
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$OUT/" \
		$plugins/main/bridge $plugins/main/host-device $plugins/ipam/host-local $plugins/main/loopback \
		./integration/testplugins/rename-as-udev \
		./integration/cluster/cmd/pause ./integration/cluster/cmd/vf-device-plugin) ||
		die "building the CNI plugins and the e2e's programs failed"
}

main() {
	local c
	shift
	mkdir -p "$CACHE" "$OUT"
	check_pins
	[ $# -gt 0 ] || set -- project multus runc containerd etcd kubernetes kubectl kube-proxy
	for c in "$@"; do
		case $c in
		project | multus | runc | containerd | etcd | kubernetes | kubectl) "build_$c" ;;
		kube-proxy) build_kube_proxy ;;
		*) die "no component $c (project multus runc containerd etcd kubernetes kubectl kube-proxy)" ;;
		esac
	done
}

main "$@"
