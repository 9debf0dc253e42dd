package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

// benchBinaries are the plugins whose VERSION exec and size the report shows.
func benchBinaries(o options) []string {
	if o.baseline != "" {
		return []string{ours, ourBaseline, tuning, floor, hostDevice}
	}
	return []string{ours, tuning, floor, hostDevice}
}

// versionExecs times `CNI_COMMAND=VERSION <plugin>` for each binary,
// interleaved in random order: the cost of exec, Go runtime start and
// package init before a plugin does anything.
//
// Each binary runs from versionCopies copies in turn: how the kernel lays one
// copy out in the page cache moves its exec by 0.1–0.2 ms here, and with a
// single copy per binary that luck decided the VERSION verdict run to run.
func versionExecs(tb *harness.ProgramTB, o options, binaries []string) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	rng := rand.New(rand.NewPCG(o.seed, 13))
	stdin := []byte(`{"cniVersion":"` + o.cniVersion + `"}`)
	copies := versionCopyPaths(tb, o, binaries)
	warmup := min(o.warmup, o.versionRuns)
	for run := -warmup; run < o.versionRuns; run++ {
		for _, k := range rng.Perm(len(binaries)) {
			name := binaries[k]
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(copies[name][(run+warmup)%versionCopies])
			cmd.Env = []string{"CNI_COMMAND=VERSION", "PATH=" + os.Getenv("PATH")}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			if err != nil || !bytes.Contains(stdout.Bytes(), []byte("supportedVersions")) {
				tb.Fatalf("%s VERSION: %v: %s%s", name, err, stdout.Bytes(), stderr.Bytes())
			}
			if run >= 0 {
				out[name] = append(out[name], d)
			}
		}
	}
	return out
}

// versionCopies is how many copies of each binary VERSION runs from.
const versionCopies = 8

// versionCopyPaths writes versionCopies copies of each binary next to the
// installed one (as installBinaries does, with write(2)).
func versionCopyPaths(tb *harness.ProgramTB, o options, binaries []string) map[string][]string {
	out := map[string][]string{}
	for _, name := range binaries {
		for i := range versionCopies {
			path := filepath.Join(o.binDir, fmt.Sprintf(".version-%s-%d", name, i))
			writeCopy(tb, filepath.Join(o.binDir, name), path)
			out[name] = append(out[name], path)
		}
	}
	return out
}

func binarySizes(tb *harness.ProgramTB, binDir string, binaries []string) map[string]int64 {
	out := map[string]int64{}
	for _, name := range binaries {
		fi, err := os.Stat(filepath.Join(binDir, name))
		if err != nil {
			tb.Fatalf("%v", err)
		}
		out[name] = fi.Size()
	}
	return out
}

// machine is what the report says about where it ran.
type machine struct {
	cpus                  int
	cpuModel, kernel      string
	loadBefore, loadAfter string
	date                  string
	diskFS                string // file system type under -disk-dir
}

func describeMachine(diskDir string) machine {
	m := machine{cpus: runtime.NumCPU(), loadBefore: loadAvg(), date: time.Now().UTC().Format("2006-01-02 15:04 MST"), diskFS: fsType(diskDir)}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadAvg is the 1-, 5- and 15-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// fsType names the file system a directory is on, by its statfs magic.
func fsType(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return "?"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("fs 0x%x", st.Type)
}
