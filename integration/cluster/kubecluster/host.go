package kubecluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// hostMounts is this process's mount table as "mount point, type, source"
// lines.
func hostMounts() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo reads a mountinfo table (proc(5)) as "mount point, type,
// source" lines; the optional fields before the "-" separator are skipped.
func parseMountinfo(r io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// id parent major:minor root mountpoint options … - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 5 || sep+2 >= len(fields) {
			continue
		}
		out[fields[4]+" "+fields[sep+1]+" "+fields[sep+2]] = true
	}
	return out, sc.Err()
}

// hostLeftovers lists what the run left on the host: mounts that were not
// there before, processes still in the run's namespaces or running one of
// its binaries, and the pods' cgroups.
func hostLeftovers(before map[string]bool, workDir, binDir string) []string {
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
	if b, err := os.ReadFile(filepath.Join(workDir, namespacesFile)); err == nil {
		for _, l := range strings.Fields(string(b)) {
			nsLinks[l] = true
		}
	} else {
		out = append(out, fmt.Sprintf("the run stage recorded no namespaces (%v): cannot check them", err))
	}
	out = append(out, runProcesses(nsLinks, binaries(binDir))...)
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, cgroupRoot)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, cgroupRoot))
		}
	}
	return out
}

// binaries is the set of the resolved paths of the files in binDir.
func binaries(binDir string) map[string]bool {
	bins := map[string]bool{}
	entries, _ := os.ReadDir(binDir)
	for _, e := range entries {
		if p, err := filepath.EvalSymlinks(filepath.Join(binDir, e.Name())); err == nil {
			bins[p] = true
		}
	}
	return bins
}

// runProcesses lists the host's processes in one of the namespaces nsLinks
// names or running one of bins.
func runProcesses(nsLinks, bins map[string]bool) []string {
	var out []string
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
	return out
}
