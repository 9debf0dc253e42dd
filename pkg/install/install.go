// Package install copies the running sriov-stable-cni binary into a CNI bin
// directory (the host's /opt/cni/bin, mounted into the installer DaemonSet)
// atomically, and proves the copy runs before it takes the plugin's name.
//
// It is linked into the CNI binary, so it uses the standard library and
// golang.org/x/sys only.
package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultName is the file name the plugin is installed under: the "type" a
// network configuration names.
const DefaultName = "sriov-stable-cni"

// DefaultVerifyTimeout bounds the VERSION run of the installed copy.
const DefaultVerifyTimeout = 10 * time.Second

// tempInfix marks the installer's temporary files in the bin directory:
// ".<name>.install-<random>". The leading dot keeps them out of `ls` and they
// never carry a name a network configuration could ask for.
const tempInfix = ".install-"

// staleTempAge is how old a leftover temporary file must be before an
// installer removes it. The directory lock already keeps two installers
// apart; the age keeps a foreign tool that happens to use the same prefix safe.
const staleTempAge = time.Minute

// Mode is the permission of the installed binary.
const Mode fs.FileMode = 0o755

// ErrVerify marks a copy that did not run or did not report the expected CNI
// versions. The previous binary, if any, is still in place.
var ErrVerify = errors.New("installed copy failed verification")

// Options says what to install where.
type Options struct {
	// Source is the file to install; the running executable in production.
	Source string
	// Dir is the CNI bin directory, e.g. /host/opt/cni/bin.
	Dir string
	// Name is the file name in Dir; DefaultName when empty.
	Name string
	// Versions are the CNI versions the installed copy must report, exactly.
	Versions []string
	// VerifyTimeout bounds the VERSION run; DefaultVerifyTimeout when zero.
	VerifyTimeout time.Duration
	// Verify, when set, replaces the CNI VERSION check for a binary that is
	// not a CNI plugin (the agent): it runs the copy at path and returns
	// an error wrapping ErrVerify when the copy does not work.
	Verify func(ctx context.Context, path string) error
}

// Action says what Install did.
type Action string

// Actions reported in Result.
const (
	Installed Action = "installed" // no file of that name before
	Replaced  Action = "replaced"  // a different file was atomically replaced
	Unchanged Action = "unchanged" // the same content was already there
)

// Result describes a successful install.
type Result struct {
	Action   Action
	Path     string
	Size     int64
	SHA256   string
	Versions []string // as reported by the installed copy
}

// Install puts Source into Dir under Name:
//
//  1. take an exclusive flock on Dir, so two installers never interleave;
//  2. if Dir/Name already has the same content and mode 0755, leave it alone;
//  3. else write a temporary file in Dir, fsync it and chmod it 0755;
//  4. run the temporary copy with CNI_COMMAND=VERSION and check it reports
//     exactly Versions (this is the copy that will be installed: same bytes,
//     same file system, same mount options such as noexec);
//  5. rename it over Dir/Name and fsync Dir.
//
// The previous binary keeps its name until the verified copy replaces it in
// one rename, so a runtime executing the plugin at any moment finds either
// the old or the new binary, never a partial or unverified one. On any
// failure the temporary file is removed. An unchanged binary is still run,
// which catches a bin directory mounted noexec.
func Install(ctx context.Context, o Options) (res Result, err error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := ValidateName(o.Name); err != nil {
		return Result{}, err
	}
	if o.VerifyTimeout <= 0 {
		o.VerifyTimeout = DefaultVerifyTimeout
	}
	if len(o.Versions) == 0 && o.Verify == nil {
		return Result{}, errors.New("no expected CNI versions given to verify against")
	}
	dir, err := openDir(o.Dir)
	if err != nil {
		return Result{}, err
	}
	defer dir.Close()
	if err := lockDir(ctx, dir); err != nil {
		return Result{}, err
	}
	removeStaleTemps(o.Dir, o.Name)

	src, err := readSource(o.Source)
	if err != nil {
		return Result{}, err
	}
	res = Result{Path: filepath.Join(o.Dir, o.Name), Size: int64(len(src)), SHA256: hexSum(src)}

	previous, err := existing(res.Path, src)
	if err != nil {
		return Result{}, err
	}
	if previous == Unchanged {
		if res.Versions, err = o.verify(ctx, res.Path); err != nil {
			return Result{}, fmt.Errorf("%s is already this binary but does not run: %w", res.Path, err)
		}
		res.Action = Unchanged
		return res, nil
	}

	tmp, err := stage(o.Dir, o.Name, src)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if res.Versions, err = o.verify(ctx, tmp); err != nil {
		if previous == Replaced {
			return Result{}, fmt.Errorf("kept the previous %s: %w", res.Path, err)
		}
		return Result{}, fmt.Errorf("nothing installed at %s: %w", res.Path, err)
	}
	if err = commit(dir, tmp, res.Path); err != nil {
		return Result{}, err
	}
	res.Action = previous
	return res, nil
}

// ValidateName rejects an install name that is not a plain file name.
func ValidateName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("install name %q is not a plain file name", name)
	}
	if strings.HasPrefix(name, ".") {
		return fmt.Errorf("install name %q starts with a dot; runtimes would not find it by type", name)
	}
	return nil
}

// openDir opens the bin directory, saying plainly when it is missing or not
// a directory: the usual cause is a DaemonSet whose hostPath is wrong.
func openDir(path string) (*os.File, error) {
	if path == "" {
		return nil, errors.New("no cni bin dir given")
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cni bin dir %s does not exist (is the host's CNI bin dir mounted there?): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("cni bin dir %s: %w", path, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("cni bin dir %s is not a directory", path)
	}
	d, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open cni bin dir %s: %w", path, err)
	}
	return d, nil
}

// lockDir takes an exclusive flock on the directory itself (no lock file is
// left in the bin dir), polling so a cancelled context still returns.
func lockDir(ctx context.Context, dir *os.File) error {
	for {
		err := unix.Flock(int(dir.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lock cni bin dir %s: %w", dir.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for another installer in %s: %w", dir.Name(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeStaleTemps deletes temporary files a killed installer left behind.
// Failures are ignored: a leftover temp file is untidy, not harmful.
func removeStaleTemps(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+tempInfix+"*"))
	for _, m := range matches {
		if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > staleTempAge {
			os.Remove(m)
		}
	}
}

func readSource(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no source binary given")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read source binary: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("source binary %s is empty", path)
	}
	return b, nil
}

// existing reports what installing src at path would be: Unchanged when a
// regular file with the same content and mode is there, Replaced when
// something else is, Installed when nothing is.
func existing(path string, src []byte) (Action, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Installed, nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w", path, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%s is a directory; refusing to replace it", path)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != Mode || fi.Size() != int64(len(src)) {
		return Replaced, nil
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read installed %s: %w", path, err)
	}
	if bytes.Equal(cur, src) {
		return Unchanged, nil
	}
	return Replaced, nil
}

// stage writes src to a new temporary file in dir, mode 0755, synced to
// disk, and returns its path. It removes the file again on any failure.
func stage(dir, name string, src []byte) (path string, err error) {
	f, err := os.CreateTemp(dir, "."+name+tempInfix+"*")
	if err != nil {
		if errors.Is(err, unix.EROFS) {
			return "", fmt.Errorf("cni bin dir %s is read-only (mount the host path read-write): %w", dir, err)
		}
		return "", fmt.Errorf("cni bin dir %s is not writable: %w", dir, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(src); err != nil {
		return "", fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err = f.Chmod(Mode); err != nil {
		return "", fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// commit renames the verified temporary file over the final name, syncs the
// directory so the rename survives a crash, and checks the final name now
// holds the very file that was verified.
func commit(dir *os.File, tmp, final string) error {
	staged, err := os.Lstat(tmp)
	if err != nil {
		return fmt.Errorf("inspect staged copy: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("replace %s: %w", final, err)
	}
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("sync cni bin dir %s: %w", dir.Name(), err)
	}
	now, err := os.Lstat(final)
	if err != nil {
		return fmt.Errorf("inspect %s after rename: %w", final, err)
	}
	if !os.SameFile(staged, now) {
		return fmt.Errorf("%s was replaced by someone else right after install", final)
	}
	return nil
}

// verify proves the copy at path works: o.Verify when set, else the CNI
// VERSION check against o.Versions.
func (o Options) verify(ctx context.Context, path string) ([]string, error) {
	if o.Verify == nil {
		return verify(ctx, path, o.Versions, o.VerifyTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, o.VerifyTimeout)
	defer cancel()
	return nil, o.Verify(ctx, path)
}

// verify runs path as a runtime would for CNI_COMMAND=VERSION and checks the
// supported versions it reports are exactly want. It returns what was
// reported. Every failure wraps ErrVerify.
func verify(ctx context.Context, path string, want []string, timeout time.Duration) ([]string, error) {
	out, err := runVersion(ctx, path, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrVerify, err)
	}
	var info struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("%w: CNI_COMMAND=VERSION printed %q, not a version reply: %w", ErrVerify, clip(out), err)
	}
	got := slices.Sorted(slices.Values(info.SupportedVersions))
	exp := slices.Sorted(slices.Values(want))
	if !slices.Equal(got, exp) {
		return nil, fmt.Errorf("%w: it supports CNI versions [%s], expected [%s] (is it a different build?)",
			ErrVerify, strings.Join(got, " "), strings.Join(exp, " "))
	}
	return info.SupportedVersions, nil
}

// runVersion executes path with CNI_COMMAND=VERSION and a version request on
// stdin, as libcni does, and returns its stdout.
func runVersion(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := runCopy(ctx, path, nil, []string{"CNI_COMMAND=VERSION"}, `{"cniVersion":"1.1.0"}`)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("CNI_COMMAND=VERSION did not finish within %s", timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("CNI_COMMAND=VERSION: %w", err)
	}
	return out, nil
}

// VersionLine returns a Verify for Options that runs the copy with the
// argument "version" and wants want as the first line it prints.
func VersionLine(want string) func(ctx context.Context, path string) error {
	return func(ctx context.Context, path string) error {
		out, err := runCopy(ctx, path, []string{"version"}, nil, "")
		if err != nil {
			return fmt.Errorf("%w: version: %w", ErrVerify, err)
		}
		if got, _, _ := strings.Cut(string(out), "\n"); got != want {
			return fmt.Errorf("%w: version printed %q, expected %q (is it a different build?)", ErrVerify, clip([]byte(got)), want)
		}
		return nil
	}
}

// runCopy executes path with args, env and stdin until ctx ends, and
// returns its stdout. A freshly written file can briefly be "text file
// busy" when another goroutine forked while it was open for writing; that
// is retried until ctx ends.
func runCopy(ctx context.Context, path string, args, env []string, stdin string) ([]byte, error) {
	for {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout = &limitedWriter{w: &stdout, n: 64 << 10}
		cmd.Stderr = &limitedWriter{w: &stderr, n: 4 << 10}
		// Its own process group, so a timeout also ends anything it forked.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		switch {
		case err == nil:
			return stdout.Bytes(), nil
		case errors.Is(err, syscall.ETXTBSY) && ctx.Err() == nil:
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("did not finish in time: %w", ctx.Err())
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("cannot execute %s (is the directory mounted noexec?): %w", path, err)
		}
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil, fmt.Errorf("exited with %s: %q", exitErr.ProcessState, clip(stderr.Bytes()))
		}
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
}

// limitedWriter keeps the first n bytes and discards the rest, so a runaway
// binary cannot fill the installer's memory.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
