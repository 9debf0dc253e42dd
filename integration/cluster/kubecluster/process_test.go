package kubecluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestJudgeLeftovers is the teardown's verdict on what outlived the
// components, without a cluster: the run's shims serving k8s.io and what
// runs under them are leftovers it kills and counts; anything else fails
// the teardown, each process named.
func TestJudgeLeftovers(t *testing.T) {
	const shimExe = "/cache/bin/containerd-shim-runc-v2"
	shim := Process{PID: 10, PPID: 1, Exe: shimExe,
		Cmdline: shimExe + " -namespace k8s.io -id 3f2a -address /run/containerd/containerd.sock"}
	pause := Process{PID: 11, PPID: 10, Exe: "/pause", Cmdline: "/pause"}
	inPod := Process{PID: 12, PPID: 11, Exe: "/usr/bin/sriov-stable-agent", Cmdline: "/usr/bin/sriov-stable-agent monitor"}
	kubelet := Process{PID: 20, PPID: 1, Exe: "/cache/bin/kubelet", Cmdline: "/cache/bin/kubelet --config=/run/sriov-e2e/kubelet.yaml"}
	for _, tc := range []struct {
		name    string
		procs   Processes
		shimExe string
		want    Leftovers
		unknown []Process // named in the error; none: no error
	}{
		{name: "nothing left", shimExe: shimExe},
		{name: "a shim and its containers", procs: Processes{shim, pause, inPod}, shimExe: shimExe,
			want: Leftovers{Shims: Processes{shim}, Containers: Processes{pause, inPod}}},
		{name: "a component left fails, named", procs: Processes{shim, pause, kubelet}, shimExe: shimExe,
			want: Leftovers{Shims: Processes{shim}, Containers: Processes{pause}}, unknown: []Process{kubelet}},
		{name: "a shim of another namespace is not the cluster's", procs: Processes{withCmdline(shim, "-namespace moby"), pause}, shimExe: shimExe,
			unknown: []Process{withCmdline(shim, "-namespace moby"), pause}},
		{name: "a namespace that only starts with k8s.io is not it", procs: Processes{withCmdline(shim, "-namespace k8s.io.x")}, shimExe: shimExe,
			unknown: []Process{withCmdline(shim, "-namespace k8s.io.x")}},
		{name: "the shim binary of another install is not the run's", procs: Processes{withExe(shim, "/usr/bin/containerd-shim-runc-v2")}, shimExe: shimExe,
			unknown: []Process{withExe(shim, "/usr/bin/containerd-shim-runc-v2")}},
		{name: "an unresolved shim path matches no unreadable exe", procs: Processes{withExe(shim, "")}, shimExe: "",
			unknown: []Process{withExe(shim, "")}},
		{name: "an orphan whose shim is gone", procs: Processes{inPod}, shimExe: shimExe, unknown: []Process{inPod}},
		{name: "a parent loop ends", procs: Processes{{PID: 30, PPID: 31}, {PID: 31, PPID: 30}}, shimExe: shimExe,
			unknown: []Process{{PID: 30, PPID: 31}, {PID: 31, PPID: 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := judgeLeftovers(tc.procs, tc.shimExe)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("leftovers (-want +got):\n%s", diff)
			}
			if len(tc.unknown) == 0 {
				if err != nil {
					t.Errorf("teardown fails on known leftovers: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("teardown passes with %v left", tc.unknown)
			}
			for _, p := range tc.unknown {
				if !strings.Contains(err.Error(), p.String()) {
					t.Errorf("the error does not name %s: %v", p, err)
				}
			}
		})
	}
}

func withCmdline(p Process, args string) Process {
	p.Cmdline = p.Exe + " " + args + " -id 3f2a"
	return p
}

func withExe(p Process, exe string) Process {
	p.Exe = exe
	return p
}

func TestParentPID(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want int
	}{
		{"123 (pause) S 45 123 123 0 -1 4194560", 45},
		{"7 (a (b) c) R 9 7 7 0", 9}, // a command name with spaces and parentheses
		{"7 (x)", 0},
		{"", 0},
	} {
		if got := parentPID(tc.stat); got != tc.want {
			t.Errorf("parentPID(%q) = %d, want %d", tc.stat, got, tc.want)
		}
	}
}

func TestProcessesPrintOnOneLine(t *testing.T) {
	got := Processes{{PID: 10, PPID: 1, Cmdline: "shim -namespace k8s.io"}, {PID: 11, PPID: 10, Cmdline: "/pause"}}.String()
	if want := "10 (parent 1) shim -namespace k8s.io; 11 (parent 10) /pause"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := Processes(nil).String(); got != "" {
		t.Errorf("no process prints %q", got)
	}
}
