//go:build clustere2e

package cluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupRoot is the cgroup (in every v1 hierarchy and in the unified one)
// under which kubelet puts its pods: created before kubelet starts and
// removed at teardown, cgroups being the one thing of the run that is not
// in its namespaces.
const cgroupRoot = "sriov-stable-e2e"

// namespacesFile, in the work dir, holds the run stage's namespace links
// (net:[…], mnt:[…], pid:[…]) for the host check.
const namespacesFile = "namespaces"

// hostMounts is the host's mount table as "mount point, type, source" lines.
func hostMounts() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options … - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := indexOf(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out[fields[4]+" "+fields[sep+1]+" "+fields[sep+2]] = true
	}
	return out, sc.Err()
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// hostLeftovers lists what the run left on the host: mounts that were not
// there before, processes still in the run's namespaces or running one of
// its binaries, and the pods' cgroups.
func hostLeftovers(before map[string]bool) []string {
	var out []string
	if now, err := hostMounts(); err != nil {
		out = append(out, fmt.Sprintf("cannot read the mount table: %v", err))
	} else {
		for m := range now {
			if !before[m] {
				out = append(out, "mount "+m)
			}
		}
	}
	nsLinks := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(*workDir, namespacesFile)); err == nil {
		for _, l := range strings.Fields(string(b)) {
			nsLinks[l] = true
		}
	} else {
		out = append(out, fmt.Sprintf("the run stage recorded no namespaces (%v): cannot check them", err))
	}
	bins := map[string]bool{}
	if entries, err := os.ReadDir(*binDir); err == nil {
		for _, e := range entries {
			if p, err := filepath.EvalSymlinks(filepath.Join(*binDir, e.Name())); err == nil {
				bins[p] = true
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, _ := os.ReadFile(filepath.Join(p, "comm"))
		who := fmt.Sprintf("process %s (%s)", filepath.Base(p), strings.TrimSpace(string(comm)))
		for _, kind := range []string{"net", "mnt", "pid"} {
			if l, err := os.Readlink(filepath.Join(p, "ns", kind)); err == nil && nsLinks[l] {
				out = append(out, who+" in the run's namespace "+l)
			}
		}
		if exe, err := os.Readlink(filepath.Join(p, "exe")); err == nil && bins[exe] {
			out = append(out, who+" runs "+exe)
		}
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, cgroupRoot)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, cgroupRoot))
		}
	}
	return out
}
