#!/usr/bin/env bash
# make cluster-e2e: builds every component at the versions of versions.env
# (cached by version, build.sh), the project image twice (two versions, for
# the upgrade scenario), and the e2e test binary, then runs it as root. The
# test binary brings up a single-node Kubernetes inside private network,
# mount and PID namespaces on a fixture DGX H200 node, runs the scenarios,
# prints the figures and tears everything down; then it checks from the
# host that nothing of the run is left (docs/cluster-e2e.md).
#
# Environment (all optional):
#   CLUSTER_CACHE    built upstream binaries; survives runs
#                    (default /var/cache/sriov-stable-cluster)
#   CLUSTER_WORK     this run's files: binaries, images, logs, pod logs
#                    (default integration/cluster/.work)
#   CLUSTER_RUN      regexp of the scenarios to run, as go test -run
#                    (default: all; the teardown, in TestMain, always runs)
#   CLUSTER_TIMEOUT  seconds before the test binary stops itself (default 1200)
#   CLUSTER_CHURN_CYCLES, CLUSTER_LATENCY_PODS  scenario sizes (default 100, 20)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${CLUSTER_WORK:-$HERE/.work}
TIMEOUT=${CLUSTER_TIMEOUT:-1200}
# Debian packages the cluster needs: unshare and nsenter (util-linux), ip
# (iproute2), what runc's cgo build links (libseccomp-dev, pkg-config), and
# nft (nftables), which kube-proxy's nftables mode runs to write its rules
# into the run's network namespace.
PACKAGES=(util-linux iproute2 gcc libc6-dev libseccomp-dev pkg-config nftables)

export DEBIAN_FRONTEND=noninteractive

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }
now() { printf '%s' "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

install_packages() {
	local need=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
	done
	[ ${#need[@]} -eq 0 ] && return 0
	say "installing ${need[*]}"
	apt-get update -qq >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log" >&2; die "apt-get update failed"; }
	apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$WORK/apt.log" 2>&1 ||
		{ tail -20 "$WORK/apt.log" >&2; die "apt-get install ${need[*]} failed (full log: $WORK/apt.log)"; }
}

# build_images builds the project image twice with make image: version a is
# deployed first, b is the upgrade. Each lands in images/<a|b>/ with the
# binaries it holds.
build_images() {
	local base which
	base=$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)
	VERSION_A=$base-e2e-a
	VERSION_B=$base-e2e-b
	for which in a b; do
		local v=VERSION_${which^^}
		make -C "$ROOT" --no-print-directory image BIN="$WORK/images/$which" VERSION="${!v}" \
			>"$WORK/image-$which.log" 2>&1 || { cat "$WORK/image-$which.log" >&2; die "make image VERSION=${!v} failed"; }
	done
	say "images ${VERSION_A} and ${VERSION_B}"
}

build_test() {
	(cd "$ROOT" && go vet -tags clustere2e ./integration/cluster/... &&
		go test -c -tags clustere2e -o "$WORK/cluster-e2e.test" ./integration/cluster) ||
		die "building the e2e test failed"
}

nad_crd() {
	local dir
	dir=$(cd "$ROOT" && go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/network-attachment-definition-client) ||
		die "cannot locate network-attachment-definition-client"
	[ -f "$dir/artifacts/networks-crd.yaml" ] || die "$dir/artifacts/networks-crd.yaml is missing"
	printf '%s' "$dir/artifacts/networks-crd.yaml"
}

main() {
	local t0 t1 t2 t3 code=0 args=()
	[ "$(id -u)" -eq 0 ] || die "run as root: the cluster needs namespaces, mounts and cgroups"
	rm -rf "$WORK/logs" "$WORK/var-log" "$WORK/images" "$WORK/deploy"
	mkdir -p "$WORK"
	t0=$(now)
	install_packages
	(cd "$ROOT" && go mod download github.com/k8snetworkplumbingwg/network-attachment-definition-client)
	t1=$(now)
	say "phase build"
	bash "$HERE/build.sh" "$WORK/bin"
	build_images
	make -C "$ROOT" --no-print-directory helm-tool
	HELM=$(make -C "$ROOT" -s --no-print-directory print-helm)
	build_test
	t2=$(now)
	say "phase run"
	args=(-test.v -test.timeout="${TIMEOUT}s" -cluster.bin="$WORK/bin" -cluster.work="$WORK"
		-cluster.images="$WORK/images" -cluster.version-a="$VERSION_A" -cluster.version-b="$VERSION_B"
		-cluster.nad-crd="$(nad_crd)" -cluster.repo="$ROOT" -cluster.helm="$HELM"
		-cluster.churn-cycles="${CLUSTER_CHURN_CYCLES:-100}" -cluster.latency-pods="${CLUSTER_LATENCY_PODS:-20}")
	[ -z "${CLUSTER_RUN:-}" ] || args+=(-test.run="${CLUSTER_RUN}")
	set +e
	"$WORK/cluster-e2e.test" "${args[@]}" 2>&1 | tee "$WORK/e2e.log"
	code=${PIPESTATUS[0]}
	set -e
	t3=$(now)
	say "install $(elapsed "$t0" "$t1")s"
	say "build   $(elapsed "$t1" "$t2")s"
	say "run     $(elapsed "$t2" "$t3")s"
	say "total   $(elapsed "$t0" "$t3")s"
	say "logs: $WORK/logs, pod logs: $WORK/var-log/pods, test log: $WORK/e2e.log"
	[ "$code" -eq 0 ] || die "cluster e2e failed (exit $code)"
	# A scenario that skipped did not pass; a CLUSTER_RUN that matches no
	# scenario (the teardown, in TestMain, runs anyway) proves nothing.
	! grep -q -- '--- SKIP: ' "$WORK/e2e.log" || die "scenarios skipped: $(grep -- '--- SKIP: ' "$WORK/e2e.log" | tr '\n' ' ')"
	if ! grep -q '^--- PASS: ' "$WORK/e2e.log"; then
		die "no scenario ran (CLUSTER_RUN='${CLUSTER_RUN:-}' matches none)"
	fi
	say "PASS"
}

main "$@"
