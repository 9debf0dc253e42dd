package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// runTraced runs cmd under ptrace and returns its peak resident set (KiB),
// read from /proc/<pid>/status (VmHWM) when the process stops on its way
// out. wait4's ru_maxrss cannot serve: on Linux a child's maxrss starts at
// the RSS of the process it was forked from (exec keeps the old mm's high
// water mark), so every plugin would report the bench's own size.
func runTraced(cmd *exec.Cmd) (int64, error) {
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	hwm, terr := traceToExit(cmd.Process.Pid)
	err := cmd.Wait()
	if terr != nil {
		return 0, terr
	}
	return hwm, err
}

// traceToExit follows a tracee stopped at its execve until it stops at
// exit (PTRACE_EVENT_EXIT, its memory still mapped), reads VmHWM there and
// lets it go. Signals meant for the tracee are passed on.
func traceToExit(pid int) (int64, error) {
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return 0, fmt.Errorf("wait for the traced exec: %w", err)
	}
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXIT); err != nil {
		return 0, fmt.Errorf("ptrace options: %w", err)
	}
	sig := 0
	for {
		if err := syscall.PtraceCont(pid, sig); err != nil {
			return 0, fmt.Errorf("ptrace continue: %w", err)
		}
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			return 0, fmt.Errorf("wait for the tracee: %w", err)
		}
		if !ws.Stopped() {
			return 0, fmt.Errorf("tracee ended without an exit stop: %v", ws)
		}
		if ws.TrapCause() == syscall.PTRACE_EVENT_EXIT {
			hwm, err := vmHWM(pid)
			if cerr := syscall.PtraceCont(pid, 0); cerr != nil && err == nil {
				err = fmt.Errorf("ptrace continue at exit: %w", cerr)
			}
			return hwm, err
		}
		sig = int(ws.StopSignal())
		if ws.StopSignal() == syscall.SIGTRAP {
			sig = 0
		}
	}
}

func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
