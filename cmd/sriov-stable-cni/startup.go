// A chained plugin's process lives a few milliseconds, and the runtime
// starts one for every verb of every attachment: what the Go runtime does at
// start-up is a measurable part of a pod start (see README "Performance").

// The plugin is single-threaded in effect and lives a few milliseconds:
// GOMAXPROCS need not follow the cgroup's CPU quota, and sysmon need not
// re-read the quota files while the plugin runs. (Go 1.25 and later still
// read /proc/self/cgroup, /proc/self/mountinfo and the quota once at start
// whatever the setting, to count the non-default behaviour.)
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

package main

import "runtime"

func init() {
	// No one reads a heap profile of a process that lives 5 ms, but with
	// the default rate the runtime records a stack trace per 512 KiB
	// allocated, and the netlink buffers cross that on every ADD.
	runtime.MemProfileRate = 0
}
