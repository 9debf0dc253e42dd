#!/bin/sh
# /init of the SR-IOV lab guest (busybox sh): mount the basics, load the igb
# PF and igbvf VF drivers, bring the PFs up, mount the host's two 9p shares
# (lab: binaries and scenarios, read-only; out: artifacts), run the scenarios
# and power off. Lines starting with "sriov-lab:" are read by the host driver
# (run.sh): "scenarios start" and "exit N".
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
SHARE=/mnt/lab
OUT=/mnt/out
WORK=/tmp/lab

# busybox sh runs its own ip applet even when PATH names another one.
ip() { /sbin/ip "$@"; }
say() { echo "sriov-lab: $* [uptime $(cut -d' ' -f1 /proc/uptime)s]"; }

mount_basics() {
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
	mkdir -p /dev/pts /dev/shm /run/netns
	mount -t tmpfs tmpfs /tmp
	mkdir -p "$WORK"
	echo /sbin/modprobe >/proc/sys/kernel/modprobe
}

load_drivers() {
	modprobe virtio_pci && modprobe 9pnet_virtio && modprobe 9p || return 1
	# igbvf first, so VFs are bound the moment the PF creates them.
	modprobe igbvf && modprobe igb && modprobe veth
}

# pf_netdevs prints the netdev of every igb PF.
pf_netdevs() {
	for dev in /sys/bus/pci/drivers/igb/0000:*; do
		ls "$dev/net" 2>/dev/null
	done
}

bring_up_links() {
	ip link set lo up
	for n in $(pf_netdevs); do
		ip link set "$n" up || return 1
	done
	ip -br link
}

# mount_shares mounts the read-only share with the page cache on, so each
# plugin binary crosses 9p once however often it runs.
mount_shares() {
	mkdir -p "$OUT" &&
		mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro lab "$SHARE" &&
		mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out "$OUT"
}

run_scenarios() {
	set -- -test.v -test.count=1 -test.timeout=15m -lab.bin="$SHARE/bin" -lab.crashbin="$SHARE/crashpoints" -lab.work="$WORK"
	while read -r arg; do
		[ -n "$arg" ] && set -- "$@" "$arg"
	done <"$SHARE/guest-args"
	say "scenarios start"
	"$SHARE/guest.test" "$@" 2>&1
}

# keep_artifacts copies what the scenarios left (plugin logs, state) to out/.
keep_artifacts() {
	cp -r "$WORK"/. "$OUT/" 2>/dev/null
	sync
}

finish() {
	say "exit $1"
	umount "$OUT" "$SHARE" 2>/dev/null
	poweroff -f
	reboot -f
}

main() {
	mount_basics
	say "kernel $(uname -r)"
	load_drivers || { say "loading drivers failed"; finish 2; }
	bring_up_links || { say "bringing links up failed"; finish 2; }
	mount_shares || { say "mounting the 9p shares failed"; finish 2; }
	run_scenarios
	rc=$?
	keep_artifacts
	finish "$rc"
}

main
