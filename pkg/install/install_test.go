package install

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

// testVersions is what the test binary reports when run as a plugin.
var testVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// helperMode selects what the test binary does when re-executed.
const helperMode = "SRIOV_INSTALL_TEST_MODE"

// TestMain lets the test binary stand in for sriov-stable-cni: run with
// CNI_COMMAND=VERSION it answers like the plugin (through the real skel), so
// the copy the installer verifies is a real executable. In the read-only
// helper mode it installs itself into a directory it sees read-only.
func TestMain(m *testing.M) {
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		skel.PluginMainFuncs(skel.CNIFuncs{}, version.PluginSupports(testVersions...), "install test plugin")
		os.Exit(0)
	}
	if os.Getenv(helperMode) == "readonly" {
		os.Exit(installReadOnly(os.Getenv("SRIOV_INSTALL_TEST_DIR")))
	}
	os.Exit(m.Run())
}

// installReadOnly runs in a private mount namespace (see runReadOnly): it
// makes dir read-only for this process only, then installs itself into it,
// printing the error and exiting 1 when that fails.
func installReadOnly(dir string) int {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		os.Stderr.WriteString("helper: bind mount: " + err.Error() + "\n")
		return 90
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		os.Stderr.WriteString("helper: remount read-only: " + err.Error() + "\n")
		return 90
	}
	self, err := os.Executable()
	if err != nil {
		os.Stderr.WriteString("helper: " + err.Error() + "\n")
		return 90
	}
	if _, err := Install(context.Background(), Options{Source: self, Dir: dir, Versions: testVersions}); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func stat(t testing.TB, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// writeFile writes an executable file outside the bin dir to use as a source.
func writeFile(t testing.TB, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "source")
	if err := os.WriteFile(p, content, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// newerBuild returns a source that is the test binary plus trailing bytes:
// a different file that still runs and reports the same versions, as an
// upgraded build would.
func newerBuild(t testing.TB) string {
	t.Helper()
	return writeFile(t, append(readFile(t, self(t)), []byte("\x00trailer: build 2\n")...))
}

func install(t testing.TB, src, dir string) (Result, error) {
	t.Helper()
	return Install(context.Background(), Options{Source: src, Dir: dir, Versions: testVersions})
}

func mustInstall(t testing.TB, src, dir string, want Action) Result {
	t.Helper()
	res, err := install(t, src, dir)
	if err != nil {
		t.Fatalf("install %s into %s: %v", src, dir, err)
	}
	if res.Action != want {
		t.Fatalf("action = %q, want %q", res.Action, want)
	}
	return res
}

func TestFreshInstall(t *testing.T) {
	dir := t.TempDir()
	res := mustInstall(t, self(t), dir, Installed)

	final := filepath.Join(dir, DefaultName)
	if res.Path != final {
		t.Errorf("path = %s, want %s", res.Path, final)
	}
	if !bytes.Equal(readFile(t, final), readFile(t, self(t))) {
		t.Error("installed content differs from the source")
	}
	fi, err := os.Stat(final)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != Mode {
		t.Errorf("mode = %v, want %v", fi.Mode(), Mode)
	}
	if !slices.Equal(res.Versions, testVersions) {
		t.Errorf("reported versions = %v, want %v", res.Versions, testVersions)
	}
	if got := names(t, dir); !slices.Equal(got, []string{DefaultName}) {
		t.Errorf("dir holds %v, want only %s", got, DefaultName)
	}
}

func TestInstallUnderAnotherName(t *testing.T) {
	dir := t.TempDir()
	res, err := Install(context.Background(), Options{Source: self(t), Dir: dir, Name: "sriov-stable", Versions: testVersions})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"sriov-stable"}) || res.Path != filepath.Join(dir, "sriov-stable") {
		t.Errorf("dir holds %v, result path %s; want only sriov-stable", got, res.Path)
	}
}

func TestIdenticalReinstallIsNoOp(t *testing.T) {
	dir := t.TempDir()
	mustInstall(t, self(t), dir, Installed)
	final := filepath.Join(dir, DefaultName)
	before := stat(t, final)

	res := mustInstall(t, self(t), dir, Unchanged)
	after := stat(t, final)
	if before.Ino != after.Ino || before.Mtim != after.Mtim || before.Ctim != after.Ctim {
		t.Errorf("file was touched: inode %d→%d, mtime %v→%v, ctime %v→%v",
			before.Ino, after.Ino, before.Mtim, after.Mtim, before.Ctim, after.Ctim)
	}
	if !slices.Equal(res.Versions, testVersions) {
		t.Errorf("unchanged binary was not verified: versions %v", res.Versions)
	}
}

func TestUpgradeReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	mustInstall(t, self(t), dir, Installed)
	final := filepath.Join(dir, DefaultName)
	before := stat(t, final)
	// A process still running the old binary holds its inode open.
	old, err := os.Open(final)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	v2 := newerBuild(t)
	mustInstall(t, v2, dir, Replaced)

	if after := stat(t, final); after.Ino == before.Ino {
		t.Error("inode unchanged: the file was rewritten in place instead of renamed over")
	}
	if !bytes.Equal(readFile(t, final), readFile(t, v2)) {
		t.Error("installed content is not the new build")
	}
	held, err := os.ReadFile("/proc/self/fd/" + strconv.Itoa(int(old.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(held, readFile(t, self(t))) {
		t.Error("the old inode's content changed under a process holding it")
	}
	if got := names(t, dir); !slices.Equal(got, []string{DefaultName}) {
		t.Errorf("dir holds %v after upgrade, want only %s", got, DefaultName)
	}
}

func TestSameContentWrongModeIsReinstalled(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, DefaultName)
	if err := os.WriteFile(final, readFile(t, self(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, self(t), dir, Replaced)
	if fi, err := os.Stat(final); err != nil || fi.Mode() != Mode {
		t.Fatalf("after reinstall: %v, %v; want mode %v", fi.Mode(), err, Mode)
	}
}

func TestVerifyCatchesBrokenBinary(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		timeout time.Duration
		wantMsg string
	}{
		{
			name:    "wrong versions",
			content: "#!/bin/sh\necho '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.1\",\"0.4.0\"]}'\n",
			wantMsg: "supports CNI versions [0.3.1 0.4.0], expected [0.3.0 0.3.1 0.4.0 1.0.0 1.1.0]",
		},
		{
			name:    "fails",
			content: "#!/bin/sh\necho 'plugin exploded' >&2\nexit 3\n",
			wantMsg: `exited with exit status 3: "plugin exploded"`,
		},
		{
			name:    "not json",
			content: "#!/bin/sh\necho 'CNI plugin v0.1'\n",
			wantMsg: "not a version reply",
		},
		{
			name:    "not an executable",
			content: "\x7fELF but truncated",
			wantMsg: "exec format error",
		},
		{
			name:    "hangs",
			content: "#!/bin/sh\nsleep 30\n",
			timeout: 300 * time.Millisecond,
			wantMsg: "did not finish within 300ms",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := writeFile(t, []byte(tc.content))
			check := func(t *testing.T, dir, outcome string) {
				t.Helper()
				start := time.Now()
				_, err := Install(context.Background(), Options{Source: broken, Dir: dir, Versions: testVersions, VerifyTimeout: tc.timeout})
				if !errors.Is(err, ErrVerify) {
					t.Fatalf("err = %v, want ErrVerify", err)
				}
				if !strings.Contains(err.Error(), tc.wantMsg) || !strings.Contains(err.Error(), outcome) {
					t.Errorf("err = %q, want it to contain %q and %q", err, outcome, tc.wantMsg)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("verify took %s", d)
				}
			}

			t.Run("fresh", func(t *testing.T) {
				dir := t.TempDir()
				check(t, dir, "nothing installed at")
				if got := names(t, dir); len(got) != 0 {
					t.Errorf("dir holds %v after a failed install, want nothing", got)
				}
			})
			t.Run("upgrade", func(t *testing.T) {
				dir := t.TempDir()
				mustInstall(t, self(t), dir, Installed)
				final := filepath.Join(dir, DefaultName)
				before := stat(t, final)
				check(t, dir, "kept the previous")
				after := stat(t, final)
				if before.Ino != after.Ino || before.Mtim != after.Mtim {
					t.Error("the previous binary was touched by a failed upgrade")
				}
				if !bytes.Equal(readFile(t, final), readFile(t, self(t))) {
					t.Error("the previous binary's content changed")
				}
				if got := names(t, dir); !slices.Equal(got, []string{DefaultName}) {
					t.Errorf("dir holds %v, want only the previous %s", got, DefaultName)
				}
			})
		})
	}
}

func TestBadDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, wantMsg string
		wantIs             error
	}{
		{"missing", filepath.Join(base, "nope"), "does not exist", fs.ErrNotExist},
		{"not a directory", file, "is not a directory", nil},
		{"empty", "", "no cni bin dir given", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := install(t, self(t), tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantMsg)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.wantIs)
			}
		})
	}
}

func TestTargetIsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, DefaultName), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := install(t, self(t), dir)
	if err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("err = %v, want a refusal to replace a directory", err)
	}
}

// runReadOnly runs Install in a child process that sees dir bind-mounted
// read-only in its own mount namespace; the parent's view of dir stays
// writable, so it can check afterwards that nothing was written.
func runReadOnly(t *testing.T, dir string) (code int, stderr string) {
	t.Helper()
	testutil.RequireRoot(t, "bind-mounts a directory read-only in a private mount namespace (CAP_SYS_ADMIN)")
	var errb bytes.Buffer
	cmd := exec.Command(self(t))
	cmd.Env = append(os.Environ(), helperMode+"=readonly", "SRIOV_INSTALL_TEST_DIR="+dir)
	cmd.Stderr = &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run helper: %v", err)
	}
	if cmd.ProcessState.ExitCode() == 90 {
		t.Fatalf("helper could not set up the read-only mount: %s", errb.String())
	}
	return cmd.ProcessState.ExitCode(), errb.String()
}

func TestReadOnlyDirFailsCleanly(t *testing.T) {
	t.Run("fresh", func(t *testing.T) {
		dir := t.TempDir()
		code, stderr := runReadOnly(t, dir)
		if code != 1 || !strings.Contains(stderr, "is read-only") || !strings.Contains(stderr, "read-only file system") {
			t.Fatalf("exit %d, stderr %q; want 1 and a read-only error", code, stderr)
		}
		if got := names(t, dir); len(got) != 0 {
			t.Errorf("dir holds %v, want nothing", got)
		}
	})
	t.Run("upgrade", func(t *testing.T) {
		dir := t.TempDir()
		final := filepath.Join(dir, DefaultName)
		if err := os.WriteFile(final, []byte("previous build"), 0o755); err != nil {
			t.Fatal(err)
		}
		before := stat(t, final)
		code, stderr := runReadOnly(t, dir)
		if code != 1 || !strings.Contains(stderr, "is read-only") {
			t.Fatalf("exit %d, stderr %q; want 1 and a read-only error", code, stderr)
		}
		if after := stat(t, final); after.Ino != before.Ino || string(readFile(t, final)) != "previous build" {
			t.Error("the previous binary was touched")
		}
		if got := names(t, dir); !slices.Equal(got, []string{DefaultName}) {
			t.Errorf("dir holds %v, want only %s", got, DefaultName)
		}
	})
}

func TestStaleTempFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "."+DefaultName+tempInfix+"111")
	recent := filepath.Join(dir, "."+DefaultName+tempInfix+"222")
	other := filepath.Join(dir, "host-device")
	for _, p := range []string{stale, recent, other} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, self(t), dir, Installed)
	want := []string{"." + DefaultName + tempInfix + "222", "host-device", DefaultName}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("dir holds %v, want %v (stale temp removed, recent temp and other plugins kept)", got, want)
	}
}

func TestConcurrentInstallersSerialize(t *testing.T) {
	dir := t.TempDir()
	const n = 4
	var wg sync.WaitGroup
	results := make([]Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { results[i], errs[i] = install(t, self(t), dir) })
	}
	wg.Wait()
	var actions []string
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("installer %d: %v", i, errs[i])
		}
		actions = append(actions, string(results[i].Action))
	}
	slices.Sort(actions)
	want := []string{"installed", "unchanged", "unchanged", "unchanged"}
	if !slices.Equal(actions, want) {
		t.Errorf("actions = %v, want %v: the directory lock should let exactly one copy in", actions, want)
	}
	if got := names(t, dir); !slices.Equal(got, []string{DefaultName}) {
		t.Errorf("dir holds %v, want only %s", got, DefaultName)
	}
}

func TestLockWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	holder, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = Install(ctx, Options{Source: self(t), Dir: dir, Versions: testVersions})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "another installer") {
		t.Fatalf("err = %v, want a deadline while waiting for another installer", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("dir holds %v, want nothing", got)
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"sriov-stable-cni": true, "sriov": true,
		"": false, ".": false, "..": false, "../x": false, "a/b": false, ".hidden": false, "a\x00b": false,
	} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestVersionLine checks the agent's verification: the copy must print
// the wanted first line for "version".
func TestVersionLine(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	verify := VersionLine("sriov-stable-agent v1.2.3")
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"this build", `[ "$1" = version ] && printf 'sriov-stable-agent v1.2.3\ncommit: abc\n'`, true},
		{"another build", `printf 'sriov-stable-agent v0.9\ncommit: abc\n'`, false},
		{"fails", `exit 3`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(context.Background(), script(strings.ReplaceAll(tc.name, " ", "-"), tc.body))
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrVerify) {
				t.Errorf("verify: %v, want ok=%v (errors wrap ErrVerify)", err, tc.ok)
			}
		})
	}
}
