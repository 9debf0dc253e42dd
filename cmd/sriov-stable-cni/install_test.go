package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/install"
)

func TestInstallUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"no dir", nil, 2, "", "sriov-stable-cni install: --cni-bin-dir is required"},
		{"bad name", []string{"--cni-bin-dir", "/tmp", "--name", "../evil"}, 2, "", "not a plain file name"},
		{"unknown flag", []string{"--cni-bin-dri", "/tmp"}, 2, "", "flag provided but not defined: -cni-bin-dri"},
		{"stray argument", []string{"--cni-bin-dir", "/tmp", "now"}, 2, "", `unexpected argument "now"`},
		{"help", []string{"--help"}, 0, "usage: sriov-stable-cni install", ""},
		{"missing dir", []string{"--cni-bin-dir", missing}, 1, "", "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"install"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantStdout) || !strings.Contains(errOut, tc.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, stdout ~%q, stderr ~%q",
					code, out, errOut, tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

// install copies the running executable (this test binary, which answers
// CNI_COMMAND=VERSION with the plugin's versions, see TestMain); a second
// run finds it unchanged.
func TestInstallThisBinary(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("install", "--cni-bin-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "installed "+filepath.Join(dir, install.DefaultName)) {
		t.Errorf("stdout %q does not report the install", out)
	}
	got, err := os.ReadFile(filepath.Join(dir, install.DefaultName))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("installed file is not the running executable")
	}
	if code, out, errOut := runCLI("install", "--cni-bin-dir", dir, "--name", "sriov"); code != 0 || !strings.Contains(out, "installed "+filepath.Join(dir, "sriov")) {
		t.Errorf("--name sriov: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := runCLI("install", "--cni-bin-dir", dir); code != 0 || !strings.Contains(out, "unchanged") {
		t.Errorf("second run: exit %d, stdout %q; want 0 and unchanged", code, out)
	}
}

// install --wait, run as the DaemonSet's container runs it, installs, then
// blocks until SIGTERM or SIGINT and exits 0, leaving the binary in place.
func TestInstallWaitBlocksUntilSignal(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(self, "install", "--cni-bin-dir", dir, "--wait")
			cmd.Env = append(os.Environ(), mainMode+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })

			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			waitFor := func(substr string) {
				t.Helper()
				deadline := time.After(30 * time.Second)
				for {
					select {
					case l, ok := <-lines:
						if !ok {
							t.Fatalf("the installer closed stdout before %q; stderr %q", substr, errb.String())
						}
						if strings.Contains(l, substr) {
							return
						}
					case <-deadline:
						t.Fatalf("no %q from the installer within 30s", substr)
					}
				}
			}
			waitFor("waiting for SIGTERM")
			if _, err := os.Stat(filepath.Join(dir, install.DefaultName)); err != nil {
				t.Fatalf("not installed before waiting: %v", err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			waitFor("signal received")
			for range lines {
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the installer exited with %v; stderr %q", err, errb.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the installer did not exit after the signal")
			}
			if _, err := os.Stat(filepath.Join(dir, install.DefaultName)); err != nil {
				t.Errorf("binary gone after the signal: %v", err)
			}
		})
	}
}
