#!/usr/bin/env bash
# The QEMU SR-IOV lab. Installs what it needs from Debian's archive, builds the
# plugins, the guest scenarios and a small initramfs, boots a stock Debian
# kernel under QEMU (TCG) with two emulated Intel 82576 (igb) PFs, runs the
# scenarios in the guest against real igbvf VFs and exits non-zero unless every
# scenario passed. The guest log is kept as an artifact.
#
# Environment (all optional):
#   LAB_CACHE    downloads and the unpacked kernel; survives runs
#                (default /var/cache/sriov-stable-lab)
#   LAB_WORK     this run's files: initramfs, share/, out/, guest.log
#                (default integration/lab/.work)
#   LAB_RUN      regexp for the guest scenarios, as go test -run (default: all)
#   LAB_KERNEL   Debian kernel package (default: the one linux-image-amd64 depends on)
#   LAB_TIMEOUT  seconds before QEMU is stopped (default 1200); the scenarios
#                themselves stop a minute earlier
#   LAB_SOAK_CYCLES  cycles of the real-VF soak scenario (default 40; make
#                lab-soak runs 200)
set -euo pipefail

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$LAB_DIR/../.." && pwd)
CACHE=${LAB_CACHE:-/var/cache/sriov-stable-lab}
WORK=${LAB_WORK:-$LAB_DIR/.work}
SHARE=$WORK/share # read-only in the guest: binaries, scenarios, their arguments
OUT=$WORK/out     # written by the guest: plugin logs, state, caches per scenario
LOG=$WORK/guest.log
TIMEOUT=${LAB_TIMEOUT:-1200}
# Modules the guest loads at boot; their dependencies are resolved with modinfo.
MODULES=(virtio_pci 9pnet_virtio 9p igbvf igb veth)
# Modules staged for the scenarios to load themselves (never at boot): the
# RDMA core and Soft-RoCE. The lab's own sst_ib.ko (ibtest/) goes to extra/
# next to them.
STAGED_MODULES=(ib_core ib_uverbs rdma_rxe)
# Staged when the kernel has them as modules: 6.1's rdma_rxe fails
# `rdma link add` with ENOENT unless crc32_generic is loadable.
OPTIONAL_MODULES=(crc32_generic)
# The backports archive of the host's Debian release (bookworm on this machine kind).
CODENAME=$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-bookworm}")
BACKPORTS_LINE="deb http://deb.debian.org/debian $CODENAME-backports main"
APT_UPDATED=

export DEBIAN_FRONTEND=noninteractive
export CGO_ENABLED=0

say() { printf 'lab: %s\n' "$*"; }
die() { printf 'lab: error: %s\n' "$*" >&2; exit 1; }
now() { printf '%s' "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- install ---

# apt_private runs apt-get with a private sources list adding bookworm-backports
# to the host's own sources, so the host's apt configuration files stay as they are.
apt_private() {
	mkdir -p "$CACHE/apt"
	printf '%s\n' "$BACKPORTS_LINE" >"$CACHE/apt/backports.list"
	apt-get -q -o Dir::Etc::SourceList="$CACHE/apt/backports.list" \
		-o APT::Sandbox::User=root "$@"
}

apt_update_once() {
	[ -n "$APT_UPDATED" ] && return 0
	apt_private update -qq || die "apt-get update failed"
	APT_UPDATED=1
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }

# qemu_has_igb tells whether the installed QEMU can emulate the igb PF (QEMU >= 8.0).
qemu_has_igb() {
	command -v qemu-system-x86_64 >/dev/null &&
		qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"'
}

# qemu_release prints the archive to take qemu-system-x86 from: the host's
# default when its candidate is >= 8.0 (igb), else <codename>-backports. With
# -t the dependencies (qemu-system-common, -data, seabios) come from the same
# archive; "pkg/release" pins only the named package and apt reports "held
# broken packages" once backports moves ahead of the release.
qemu_release() {
	local cand
	cand=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ { print $2; exit }')
	if [ -n "$cand" ] && [ "$cand" != "(none)" ] && dpkg --compare-versions "$cand" ge 1:8.0; then
		printf 'default'
	else
		printf '%s-backports' "$CODENAME"
	fi
}

install_packages() {
	local need=() p release
	# make, gcc-12 (the compiler Debian built the lab kernel with) and
	# libelf1 (the kernel headers' objtool) build the sst_ib module.
	for p in busybox-static kmod cpio iproute2 xz-utils make gcc-12 libelf1; do
		installed "$p" || need+=("$p")
	done
	if [ ${#need[@]} -eq 0 ] && qemu_has_igb; then say "packages already installed"; return 0; fi
	apt_update_once
	if [ ${#need[@]} -gt 0 ]; then
		say "installing ${need[*]}"
		apt_private install -y -qq --no-install-recommends "${need[@]}" >"$WORK/apt.log" 2>&1 ||
			{ tail -20 "$WORK/apt.log" >&2; die "apt-get install ${need[*]} failed (full log: $WORK/apt.log)"; }
	fi
	qemu_has_igb && return 0
	release=$(qemu_release)
	say "installing qemu-system-x86 from $release"
	local target=()
	[ "$release" = default ] || target=(-t "$release")
	apt_private install -y -qq --no-install-recommends "${target[@]}" qemu-system-x86 >"$WORK/apt-qemu.log" 2>&1 ||
		{ tail -20 "$WORK/apt-qemu.log" >&2; die "apt-get install -t $release qemu-system-x86 failed (full log: $WORK/apt-qemu.log)"; }
	qemu_has_igb || die "qemu-system-x86 $(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) from $release has no igb device; the lab needs QEMU >= 8.0 (apt-cache policy qemu-system-x86 lists the archives offering it)"
	say "qemu $(dpkg-query -W -f='${Version}' qemu-system-x86) has the igb device"
}

# kernel_package names the Debian kernel to boot: LAB_KERNEL, else the one
# already unpacked in the cache, else the one linux-image-amd64 depends on
# (the caller has run apt_update_once for that case).
kernel_package() {
	if [ -n "${LAB_KERNEL:-}" ]; then
		printf '%s' "$LAB_KERNEL"
	elif [ -s "$CACHE/kernel/current" ]; then
		cat "$CACHE/kernel/current"
	else
		apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ { print $2; exit }'
	fi
}

# fetch_kernel downloads the kernel package and unpacks it under the cache;
# the host's /boot and /lib/modules are never touched.
fetch_kernel() {
	local pkg dir
	if [ -z "${LAB_KERNEL:-}" ] && [ ! -s "$CACHE/kernel/current" ]; then apt_update_once; fi
	pkg=$(kernel_package)
	[ -n "$pkg" ] || die "cannot resolve a kernel package from linux-image-amd64"
	dir=$CACHE/kernel/$pkg
	if [ ! -e "$dir/.complete" ]; then
		say "fetching kernel $pkg"
		apt_update_once
		rm -rf "$dir" "$dir.tmp" && mkdir -p "$dir.tmp"
		(cd "$dir.tmp" && apt_private download "$pkg" >/dev/null) || die "apt-get download $pkg failed"
		dpkg -x "$dir.tmp"/*.deb "$dir.tmp/root" || die "cannot unpack $pkg"
		rm -f "$dir.tmp"/*.deb
		touch "$dir.tmp/.complete" && mv "$dir.tmp" "$dir"
	fi
	printf '%s\n' "$pkg" >"$CACHE/kernel/current"
	KROOT=$dir/root
	KVER=$(basename "$(ls -d "$KROOT"/lib/modules/*/ | head -1)")
	VMLINUZ=$KROOT/boot/vmlinuz-$KVER
	[ -f "$VMLINUZ" ] || die "no kernel image in $pkg"
	say "kernel $KVER"
}

# ------------------------------------------------------------------ build ---

# fetch_headers unpacks the lab kernel's build tree under the cache: Debian's
# linux-headers-$KVER, the -common package and linux-kbuild it depends on
# (names and versions read from its Depends), unpacked with dpkg -x, the
# arch package's absolute include of the common tree pointed at the copy.
# Sets HDIR to the tree to pass to make -C.
fetch_headers() {
	local dir=$CACHE/headers/$KVER arch=linux-headers-$KVER deps dep name rel ver want=()
	HDIR=$dir/root/usr/src/$arch
	[ -e "$dir/.complete" ] && return 0
	say "fetching kernel headers $arch"
	apt_update_once
	rm -rf "$dir" "$dir.tmp" && mkdir -p "$dir.tmp"
	(cd "$dir.tmp" && apt_private download "$arch" >/dev/null) ||
		die "apt-get download $arch failed (the sst_ib module needs the lab kernel's headers)"
	deps=$(dpkg-deb -f "$dir.tmp"/"$arch"_*.deb Depends)
	# Depends: linux-headers-6.1.0-57-common (= 6.1.192-3), linux-kbuild-6.1 (>= 6.1.192-3), ...
	while read -r name rel ver; do
		case $name in
		linux-headers-*-common | linux-kbuild-*)
			ver=${ver%)}
			if [ "$rel" = "(=" ]; then want+=("$name=$ver"); else want+=("$name"); fi
			;;
		esac
	done < <(printf '%s\n' "$deps" | tr ',' '\n' | sed 's/^ *//')
	[ ${#want[@]} -eq 2 ] || die "$arch depends on '$deps': expected one -common and one linux-kbuild package"
	(cd "$dir.tmp" && apt_private download "${want[@]}" >/dev/null) || die "apt-get download ${want[*]} failed"
	for dep in "$dir.tmp"/*.deb; do
		dpkg -x "$dep" "$dir.tmp/root" || die "cannot unpack $dep"
	done
	rm -f "$dir.tmp"/*.deb
	# The arch tree's Makefile is one line: include /usr/src/linux-headers-<abi>-common/Makefile
	sed -i "s|^include /usr/src/|include $dir/root/usr/src/|" "$dir.tmp/root/usr/src/$arch/Makefile"
	touch "$dir.tmp/.complete" && mv "$dir.tmp" "$dir"
}

# build_ib_module builds the lab's test InfiniBand provider, ibtest/sst_ib.c,
# for the lab kernel. The .ko is cached under a key of its sources and KVER,
# so a warm run neither fetches headers nor compiles. Sets IB_MODULE.
build_ib_module() {
	local src=$LAB_DIR/ibtest key out tmp=$WORK/ibtest t0
	key=$({ printf '%s\n' "$KVER"; cat "$src/Kbuild" "$src"/*.c; } | sha256sum | cut -c1-16)
	out=$CACHE/ibtest/sst_ib-$KVER-$key.ko
	IB_MODULE=$out
	[ -s "$out" ] && return 0
	t0=$(now)
	fetch_headers
	rm -rf "$tmp" && mkdir -p "$tmp" "$CACHE/ibtest"
	cp "$src/Kbuild" "$src"/*.c "$tmp/"
	# No BTF for a test module: it would need pahole (dwarves) on newer kernels.
	make -C "$HDIR" M="$tmp" CONFIG_DEBUG_INFO_BTF_MODULES= modules >"$WORK/ibtest.log" 2>&1 ||
		{ cat "$WORK/ibtest.log" >&2; die "building sst_ib for $KVER failed"; }
	if grep -q 'warning:' "$WORK/ibtest.log"; then
		cat "$WORK/ibtest.log" >&2
		die "sst_ib builds with warnings for $KVER"
	fi
	cp "$tmp/sst_ib.ko" "$out.tmp" && mv "$out.tmp" "$out"
	say "built sst_ib.ko for $KVER in $(elapsed "$t0" "$(now)")s (cached afterwards)"
}

build_plugins() {
	make -C "$ROOT" --no-print-directory build >"$WORK/build.log" 2>&1 ||
		{ cat "$WORK/build.log" >&2; die "make build failed"; }
	mkdir -p "$SHARE/bin"
	# The agent too: the doctor, hostconfig and monitor scenarios run it.
	cp "$ROOT/bin/sriov-stable-cni" "$ROOT/bin/sriov-stable-agent" "$SHARE/bin/"
	# host-device as pinned by the project's go.mod (tool directive).
	(cd "$ROOT" && go build -trimpath -ldflags '-s -w' -o "$SHARE/bin/host-device" \
		github.com/containernetworking/plugins/plugins/main/host-device) || die "building host-device failed"
	# rdma-isolate moves a VF's RDMA device into the pod as rdma-cni does
	# (the exclusive-mode RDMA scenarios chain it).
	(cd "$ROOT" && go build -trimpath -ldflags '-s -w' -o "$SHARE/bin/rdma-isolate" ./integration/testplugins/rdma-isolate) ||
		die "building rdma-isolate failed"
	# The crash scenario's plugin, built with the crashpoints tag: it kills
	# itself at the point SRIOV_STABLE_CNI_CRASH_POINT names.
	mkdir -p "$SHARE/crashpoints"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -tags crashpoints -ldflags '-s -w' \
		-o "$SHARE/crashpoints/sriov-stable-cni" ./cmd/sriov-stable-cni) || die "building the crashpoints plugin failed"
}

# build_multus builds the Multus thin plugin in its own tools module; the
# binary is cached under a key of that module's go.mod and go.sum.
build_multus() {
	local mod=$ROOT/tools/multus key out
	key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
	out=$CACHE/multus/multus-$key
	if [ ! -x "$out" ]; then
		say "building the Multus thin plugin (cached afterwards)"
		mkdir -p "$CACHE/multus"
		(cd "$mod" && go build -trimpath -ldflags '-s -w' -o "$out.tmp" \
			gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus) || die "building multus failed"
		mv "$out.tmp" "$out"
	fi
	cp "$out" "$SHARE/bin/multus"
}

build_guest_tests() {
	(cd "$ROOT" && go vet -tags labguest ./integration/lab/guest &&
		go test -c -tags labguest -o "$SHARE/guest.test" ./integration/lab/guest) ||
		die "building the guest scenarios failed"
	# The scenarios stop (with a goroutine dump) a minute before QEMU would.
	printf -- '-test.timeout=%ds\n' $((TIMEOUT > 120 ? TIMEOUT - 60 : 60)) >"$SHARE/guest-args"
	if [ -n "${LAB_RUN:-}" ]; then printf -- '-test.run=%s\n' "$LAB_RUN" >>"$SHARE/guest-args"; fi
	if [ -n "${LAB_SOAK_CYCLES:-}" ]; then
		case $LAB_SOAK_CYCLES in *[!0-9]*) die "LAB_SOAK_CYCLES=$LAB_SOAK_CYCLES is not a number" ;; esac
		printf -- '-lab.soak-cycles=%s\n' "$LAB_SOAK_CYCLES" >>"$SHARE/guest-args"
	fi
}

# module_index prints "name path" for every module file of the unpacked kernel.
module_index() {
	find "$KROOT/lib/modules/$KVER/kernel" -name '*.ko*' | while read -r path; do
		local name=${path##*/}
		name=${name%%.ko*}
		printf '%s %s\n' "${name//-/_}" "$path"
	done
}

# module_closure prints the given modules and everything they depend on.
module_closure() {
	local index=$1 todo=("${@:2}") seen=" " m path dep
	while [ ${#todo[@]} -gt 0 ]; do
		m=${todo[0]//-/_} todo=("${todo[@]:1}")
		case $seen in *" $m "*) continue ;; esac
		seen="$seen$m "
		path=$(awk -v m="$m" '$1 == m { print $2; exit }' "$index")
		[ -n "$path" ] || { grep -qw "$m" "$KROOT/lib/modules/$KVER/modules.builtin" && continue; die "module $m not in $KVER"; }
		printf '%s\n' "$path"
		for dep in $(modinfo -F depends "$path" | tr ',' ' '); do todo+=("$dep"); done
	done
}

stage_modules() {
	local stage=$1 index=$WORK/modules.index path rel dst m optional=()
	module_index >"$index"
	for m in "${OPTIONAL_MODULES[@]}"; do
		awk -v m="$m" '$1 == m { found = 1 } END { exit !found }' "$index" && optional+=("$m")
	done
	module_closure "$index" "${MODULES[@]}" "${STAGED_MODULES[@]}" "${optional[@]}" | while read -r path; do
		rel=${path#"$KROOT/lib/modules/$KVER/"}
		dst=$stage/lib/modules/$KVER/${rel%.xz}
		dst=${dst%.zst}
		mkdir -p "$(dirname "$dst")"
		case $path in
		*.xz) xz -dc "$path" >"$dst" ;;
		*.zst) zstd -qdc "$path" >"$dst" ;;
		*) cp "$path" "$dst" ;;
		esac
	done
	install -D -m 0644 "$IB_MODULE" "$stage/lib/modules/$KVER/extra/sst_ib.ko"
	cp "$KROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$KVER/"
	depmod -b "$stage" "$KVER" || die "depmod failed"
}

# stage_binary copies a host binary and the shared libraries it links.
stage_binary() {
	local stage=$1 bin=$2 dst=$3 lib
	install -D -m 0755 "$bin" "$stage/$dst"
	for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
		install -D -m 0755 "$lib" "$stage/$lib"
	done
}

build_initramfs() {
	local stage=$WORK/initramfs applet
	rm -rf "$stage" && mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,mnt/lab,mnt/out,etc}
	install -m 0755 /bin/busybox "$stage/bin/busybox"
	for applet in $(/bin/busybox --list-full); do
		[ "$applet" = bin/busybox ] || ln -sf /bin/busybox "$stage/$applet"
	done
	# busybox's own ip applet knows neither altnames nor parentdev.
	rm -f "$stage/sbin/ip" "$stage/bin/ip"
	stage_binary "$stage" "$(command -v ip)" sbin/ip
	# iproute2's rdma: rdma dev, rdma link add ... type rxe, rdma system set netns.
	stage_binary "$stage" "$(command -v rdma)" sbin/rdma
	mkdir -p "$stage/var" && ln -s ../run "$stage/var/run"
	stage_modules "$stage"
	install -m 0755 "$LAB_DIR/init.sh" "$stage/init"
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initramfs.gz"
}

# ------------------------------------------------------------- boot + run ---

qemu_args() {
	local i args=()
	# TCG always: this machine kind has a /dev/kvm whose nested KVM fails
	# QEMU's MSR setup, so KVM cannot be probed for by its presence.
	args+=(-M q35 -cpu max -m 1536 -smp 2 -accel tcg,thread=multi)
	args+=(-display none -serial stdio -monitor none -no-reboot -nic none)
	args+=(-kernel "$VMLINUZ" -initrd "$WORK/initramfs.gz" -append "console=ttyS0 panic=-1 quiet")
	for i in 1 2; do
		args+=(-device "pcie-root-port,id=rp$i,slot=$i,chassis=$i")
		args+=(-device "igb,bus=rp$i,netdev=pf$i,romfile=")
		args+=(-netdev "user,id=pf$i,restrict=on")
	done
	args+=(-virtfs "local,path=$SHARE,mount_tag=lab,security_model=none,readonly=on")
	args+=(-virtfs "local,path=$OUT,mount_tag=out,security_model=none")
	printf '%s\n' "${args[@]}"
}

# run_guest boots the guest, copies its console to $LOG and to stdout, and
# notes when the scenarios start (for the boot/scenarios split).
run_guest() {
	local args line
	mapfile -t args < <(qemu_args)
	: >"$LOG"
	rm -f "$WORK/scenarios.start" "$WORK/qemu.rc"
	{
		local rc=0
		timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${args[@]}" </dev/null 2>&1 || rc=$?
		echo "$rc" >"$WORK/qemu.rc"
	} | while IFS= read -r line; do
		line=${line%$'\r'}
		printf '%s\n' "$line" >>"$LOG"
		printf '%s\n' "$line"
		case $line in "sriov-lab: scenarios start"*) now >"$WORK/scenarios.start" ;; esac
	done
}

# guest_exit prints the scenarios' exit code reported by the guest, or
# nothing when the guest never reported one.
guest_exit() {
	sed -n 's/^sriov-lab: exit \([0-9][0-9]*\).*/\1/p' "$LOG" | tail -1
}

summarize_tests() {
	local failed
	PASSED=$(grep -c '^--- PASS: ' "$LOG" || true)
	SKIPPED=$(grep -c -- '--- SKIP: ' "$LOG" || true)
	failed=$(grep -c '^--- FAIL: ' "$LOG" || true)
	if [ "$failed" -gt 0 ]; then
		say "failed scenarios:"
		grep '^--- FAIL: ' "$LOG" | sed 's/^/lab:   /'
	fi
	printf 'lab: %s passed, %s failed, %s skipped\n' "$PASSED" "$failed" "$SKIPPED"
}

# ------------------------------------------------------------------- main ---

main() {
	local t0 t1 t2 t3 t4 code
	mkdir -p "$CACHE" "$WORK"
	rm -rf "$SHARE" "$OUT" && mkdir -p "$SHARE/bin" "$OUT"

	t0=$(now)
	say "phase install"
	install_packages
	fetch_kernel
	t1=$(now)
	say "phase build"
	build_plugins
	build_multus
	build_guest_tests
	build_ib_module
	build_initramfs
	t2=$(now)
	say "phase boot"
	run_guest
	t4=$(now)
	t3=$t4
	[ -s "$WORK/scenarios.start" ] && t3=$(cat "$WORK/scenarios.start")

	say "install   $(elapsed "$t0" "$t1")s"
	say "build     $(elapsed "$t1" "$t2")s"
	say "boot      $(elapsed "$t2" "$t3")s"
	say "scenarios $(elapsed "$t3" "$t4")s"
	say "total     $(elapsed "$t0" "$t4")s"
	say "guest log: $LOG"
	say "guest artifacts: $OUT"
	code=$(guest_exit)
	summarize_tests
	if [ -z "$code" ]; then
		die "the guest did not finish (QEMU exit $(cat "$WORK/qemu.rc" 2>/dev/null || echo '?')); see $LOG"
	fi
	[ "$code" -eq 0 ] || die "guest scenarios failed (exit $code); see $LOG"
	# A scenario that skipped did not pass, and a LAB_RUN that matches
	# nothing proves nothing.
	[ "$SKIPPED" -eq 0 ] || die "$SKIPPED scenario(s) skipped; the lab must not skip (see $LOG)"
	[ "$PASSED" -gt 0 ] || die "no scenario ran: LAB_RUN='${LAB_RUN:-}' matches none"
	say "PASS"
}

main "$@"
