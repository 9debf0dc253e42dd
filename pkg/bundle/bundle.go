// Package bundle writes the agent's support bundle: one node's SR-IOV
// state in one gzip'd tar an operator can attach to a vendor case
// (sriov-stable-agent bundle, docs/support-bundle.md). It only reads, and
// only what its options name: sysfs, the plugin's state directory, the
// .link files, the agent's metrics and logs, and the host's links and RDMA
// devices through netlink. Every file is read as untrusted (regular files
// only, bounded) and the whole bundle is bounded too.
package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
)

// Limits of what one entry and the whole bundle hold (uncompressed).
const (
	DefaultMaxBytes = 32 << 20
	maxStateFile    = 1 << 20  // a record or the verdict file: the state package's own bound
	maxLinkFile     = 64 << 10 // a .link file
	maxMetrics      = 4 << 20
	maxLogTail      = 1 << 20 // the end of each log file
	maxStateFiles   = 4096    // records: a node has at most a few hundred
	metricsTimeout  = 5 * time.Second
)

// Options say where the node's state is. An empty field skips its part.
type Options struct {
	SysfsRoot string
	// StateDir is the plugin's stateDir: its *.json files (attachment
	// records, the GUID index, the mirrored fabric verdict).
	StateDir string
	// LinkDir holds the host's systemd .link files (hostconfig's).
	LinkDir string
	// MetricsURL is the agent's /metrics, read once.
	MetricsURL string
	// Logs are log files whose last MiB each goes in.
	Logs []string
	// Doctor runs the node doctor with these options (its SysfsRoot set)
	// and adds its report; nil skips it.
	Doctor *doctor.Options
	// Netlink adds the links and RDMA devices of the calling thread's
	// netns (the host's, for the agent).
	Netlink bool
	// MaxBytes bounds the entries' total size; 0 means DefaultMaxBytes.
	MaxBytes int64
	Now      func() time.Time
}

// Manifest is the bundle's index, its last entry (MANIFEST.json).
type Manifest struct {
	Created time.Time `json:"created"`
	Version string    `json:"version"`
	Commit  string    `json:"commit"`
	Entries []Entry   `json:"entries"`
	// Problems are what could not be collected, one line each: the
	// bundle is still written.
	Problems []string `json:"problems"`
}

// Entry is one file of the bundle.
type Entry struct {
	Name   string `json:"name"`
	Bytes  int    `json:"bytes"`
	Source string `json:"source"` // where it came from
	// Truncated says the source was longer and only its end (logs) or
	// start was kept.
	Truncated bool `json:"truncated,omitempty"`
}

// writer adds entries to the tar within the size bound.
type writer struct {
	tw    *tar.Writer
	now   time.Time
	left  int64
	man   *Manifest
	names map[string]bool
}

// Write writes the bundle to w and returns its manifest. Parts that cannot
// be read are listed in the manifest's problems; the error is for w
// failing (or ctx ending), when the bundle is unusable.
func Write(ctx context.Context, w io.Writer, opts Options) (*Manifest, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	now := opts.Now().UTC()
	gz := gzip.NewWriter(w)
	bw := &writer{tw: tar.NewWriter(gz), now: now, left: opts.MaxBytes,
		man:   &Manifest{Created: now, Version: buildinfo.Version, Commit: buildinfo.Commit, Entries: []Entry{}, Problems: []string{}},
		names: map[string]bool{}}
	parts := []func() error{
		func() error { return bw.system() },
		func() error { return bw.doctor(opts) },
		func() error { return bw.sysfs(opts.SysfsRoot) },
		func() error { return bw.netlink(opts.Netlink) },
		func() error { return bw.state(opts.StateDir) },
		func() error { return bw.links(opts.LinkDir) },
		func() error { return bw.metrics(ctx, opts.MetricsURL) },
		func() error { return bw.logs(opts.Logs) },
	}
	for _, part := range parts {
		if err := ctx.Err(); err != nil {
			return bw.man, err
		}
		if err := part(); err != nil {
			return bw.man, err
		}
	}
	bw.man.Entries = append(bw.man.Entries, Entry{Name: "MANIFEST.json", Source: "this index"})
	man, err := json.MarshalIndent(bw.man, "", "  ")
	if err != nil {
		return bw.man, err
	}
	bw.man.Entries[len(bw.man.Entries)-1].Bytes = len(man)
	if err := bw.header("MANIFEST.json", len(man)); err != nil {
		return bw.man, err
	}
	if _, err := bw.tw.Write(man); err != nil {
		return bw.man, err
	}
	if err := bw.tw.Close(); err != nil {
		return bw.man, err
	}
	return bw.man, gz.Close()
}

func (b *writer) problem(format string, args ...any) {
	b.man.Problems = append(b.man.Problems, fmt.Sprintf(format, args...))
}

func (b *writer) header(name string, size int) error {
	return b.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), ModTime: b.now, Typeflag: tar.TypeReg})
}

// add writes one entry unless it would pass the bundle's bound (then it is
// a problem, not an error). Only a failing tar write is an error.
func (b *writer) add(name, source string, data []byte, truncated bool) error {
	if b.names[name] {
		b.problem("%s: a second entry of that name (from %s) left out", name, source)
		return nil
	}
	if int64(len(data)) > b.left {
		b.problem("%s (%d bytes, from %s) left out: the bundle's size limit has %d bytes left", name, len(data), source, b.left)
		return nil
	}
	b.names[name] = true
	b.left -= int64(len(data))
	if err := b.header(name, len(data)); err != nil {
		return err
	}
	if _, err := b.tw.Write(data); err != nil {
		return err
	}
	b.man.Entries = append(b.man.Entries, Entry{Name: name, Bytes: len(data), Source: source, Truncated: truncated})
	return nil
}

func (b *writer) addJSON(name, source string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.problem("%s: encode: %v", name, err)
		return nil
	}
	return b.add(name, source, append(data, '\n'), false)
}

// system is the agent's version and the kernel it runs on.
// Equivalent to: sriov-stable-agent version; uname -a
func (b *writer) system() error {
	var u unix.Utsname
	kernel := "unknown"
	if err := unix.Uname(&u); err == nil {
		kernel = strings.Join([]string{unix.ByteSliceToString(u.Sysname[:]), unix.ByteSliceToString(u.Nodename[:]),
			unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), unix.ByteSliceToString(u.Machine[:])}, " ")
	} else {
		b.problem("uname: %v", err)
	}
	text := fmt.Sprintf("sriov-stable-agent %s\ncommit: %s\ngo: %s %s/%s\nkernel: %s\ncollected: %s\n",
		buildinfo.Version, buildinfo.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, kernel, b.now.Format(time.RFC3339))
	return b.add("version.txt", "the agent and uname(2)", []byte(text), false)
}

func (b *writer) doctor(opts Options) error {
	if opts.Doctor == nil {
		return nil
	}
	d := *opts.Doctor
	if d.SysfsRoot == "" {
		d.SysfsRoot = opts.SysfsRoot
	}
	rep, err := doctor.Run(d)
	if err != nil {
		b.problem("doctor: %v", err)
		return nil
	}
	return b.addJSON("doctor.json", "sriov-stable-agent doctor --json", rep)
}

// state copies the state directory's JSON files (one level of
// subdirectories: attachments/), each read as untrusted.
func (b *writer) state(dir string) error {
	if dir == "" {
		return nil
	}
	var files []string
	for _, pattern := range []string{"*.json", "*/*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		b.problem("state directory %s: no JSON files (no attachment since the node booted, or another stateDir)", dir)
	}
	slices.Sort(files)
	if len(files) > maxStateFiles {
		b.problem("state directory %s: %d JSON files, the first %d kept", dir, len(files), maxStateFiles)
		files = files[:maxStateFiles]
	}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		// A subdirectory that is a link could lead anywhere: only real
		// directories of the state directory are read.
		if sub := filepath.Dir(f); sub != filepath.Clean(dir) {
			if fi, err := os.Lstat(sub); err != nil || !fi.IsDir() {
				b.problem("%s: not a directory of the state directory (a link?), left out", sub)
				continue
			}
		}
		if err := b.file("state/"+rel, f, maxStateFile); err != nil {
			return err
		}
	}
	return nil
}

// file adds the regular file at path (not through a link), at most limit
// bytes; anything else is a problem.
func (b *writer) file(name, path string, limit int64) error {
	data, err := safefile.ReadFile(path, limit)
	if err != nil {
		b.problem("%s: %v", path, err)
		return nil
	}
	return b.add(name, path, data, false)
}

// links copies the .link files.
func (b *writer) links(dir string) error {
	if dir == "" {
		return nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.link"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		b.problem("%s: no .link files (VF names are the kernel's or udev's defaults)", dir)
	}
	for _, f := range files {
		if err := b.file("links/"+filepath.Base(f), f, maxLinkFile); err != nil {
			return err
		}
	}
	return nil
}

// metrics reads the agent's /metrics once.
func (b *writer) metrics(ctx context.Context, url string) error {
	if url == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	data, truncated, err := fetch(ctx, url)
	if err != nil {
		b.problem("metrics %s: %v", url, err)
		return nil
	}
	return b.add("metrics.txt", url, data, truncated)
}

func fetch(ctx context.Context, url string) ([]byte, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("%s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMetrics+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > maxMetrics {
		return data[:maxMetrics], true, nil
	}
	return data, false, nil
}

// logs adds the last MiB of each log file.
func (b *writer) logs(paths []string) error {
	for _, p := range paths {
		data, truncated, err := tail(p, maxLogTail)
		if err != nil {
			b.problem("log %s: %v", p, err)
			continue
		}
		name := "logs/" + strings.ReplaceAll(strings.TrimPrefix(filepath.Clean(p), "/"), "/", "_")
		if err := b.add(name, p, data, truncated); err != nil {
			return err
		}
	}
	return nil
}

// tail reads the last limit bytes of the regular file at path (a link an
// operator names is followed: container logs are links).
func tail(path string, limit int64) ([]byte, bool, error) {
	f, size, err := safefile.OpenFollow(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	off := max(size-limit, 0)
	buf := make([]byte, min(size, limit))
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	buf = buf[:n]
	if off > 0 {
		// From the first whole line.
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return buf, off > 0, nil
}
