package kubecluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process is one process of the PID namespace, as /proc shows it.
type Process struct {
	PID, PPID int
	Exe       string // the resolved executable ("" when unreadable)
	Cmdline   string
}

// String is the PID, the parent's and the command line, as the teardown
// names a process.
func (p Process) String() string {
	return fmt.Sprintf("%d (parent %d) %s", p.PID, p.PPID, p.Cmdline)
}

// Processes is a list of processes that prints as one line.
type Processes []Process

// String joins the processes with "; ".
func (ps Processes) String() string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, "; ")
}

// Leftovers is what the teardown found running once every component had
// stopped, and killed: containerd's shims (a shim outlives containerd by
// design) and the processes under them, the containers they ran.
type Leftovers struct {
	Shims, Containers Processes
}

// shimBinary is the runtime shim containerd starts per sandbox.
const shimBinary = "containerd-shim-runc-v2"

// otherProcesses lists the processes of the PID namespace other than PID 1
// (the init stage) and this one.
func otherProcesses() Processes {
	var out Processes
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
		out = append(out, Process{PID: pid, PPID: parentPID(string(stat)), Exe: exe,
			Cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")})
	}
	return out
}

// parentPID reads the parent's PID from a /proc/<pid>/stat line: the field
// after the state, which follows the parenthesized command name (itself
// free to hold spaces and parentheses). 0 when the line has none.
func parentPID(stat string) int {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// judgeLeftovers sorts what is left once every component stopped: the
// shims of this cluster's containerd (shimExe, the resolved path of the
// run's containerd-shim-runc-v2, serving the CRI's namespace k8s.io), the
// processes under one (the containers they run, pause included), and
// anything else. Anything else is a process the cluster's components
// should have ended: the error names each.
func judgeLeftovers(procs Processes, shimExe string) (Leftovers, error) {
	known := func(p Process) bool {
		return shimExe != "" && p.Exe == shimExe && strings.Contains(" "+p.Cmdline+" ", " -namespace k8s.io ")
	}
	byPID := map[int]Process{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	underShim := func(p Process) bool {
		// At most one step per process: a parent loop cannot hold it.
		for range procs {
			parent, ok := byPID[p.PPID]
			if !ok || p.PPID <= 1 {
				return false
			}
			if known(parent) {
				return true
			}
			p = parent
		}
		return false
	}
	var left Leftovers
	var unknown Processes
	for _, p := range procs {
		switch {
		case known(p):
			left.Shims = append(left.Shims, p)
		case underShim(p):
			left.Containers = append(left.Containers, p)
		default:
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		return left, fmt.Errorf("%d processes outlived the cluster that are neither a shim of its containerd (%s -namespace k8s.io) nor under one: %s",
			len(unknown), shimBinary, unknown)
	}
	return left, nil
}
