package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/bundle"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	_, names, err := bundle.Read(r, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// bundle -o FILE writes the file whole (no temporary left beside it) and
// says on stderr what it could not collect; -o - writes the same to
// stdout; without -o it is a usage error.
func TestBundleCommand(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "node.tar.gz")
	args := []string{"bundle", "--sysfs-root", n.Root, "--state-dir", t.TempDir(), "--metrics-url", "", "--kmsg", "", "--link-dir", t.TempDir()}
	code, stdout, stderr := runAgent(context.Background(), append(args, "-o", out)...)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "files written to "+out) || !strings.Contains(stderr, "not collected: state directory") {
		t.Fatalf("bundle -o %s: exit %d\nstdout: %s\nstderr: %s", out, code, stdout, stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := tarNames(t, f)
	for _, want := range []string{"version.txt", "doctor.json", "sysfs/functions.json", "MANIFEST.json"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s holds %v, no %s", out, names, want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	code, stdout, stderr = runAgent(context.Background(), append(args, "-o", "-")...)
	if code != 0 || !strings.Contains(stderr, "written to standard output") {
		t.Fatalf("bundle -o -: exit %d: %s", code, stderr)
	}
	if got := tarNames(t, bytes.NewReader([]byte(stdout))); !slices.Equal(got, names) {
		t.Errorf("-o - holds %v, -o FILE %v", got, names)
	}

	if code, _, stderr := runAgent(context.Background(), args...); code != 2 || !strings.Contains(stderr, "-o FILE") {
		t.Errorf("bundle without -o: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runAgent(context.Background(), "bundle", "-o", filepath.Join(dir, "no", "such", "dir", "b.tgz"), "--kmsg", ""); code != 1 || !strings.Contains(stderr, "create the bundle") {
		t.Errorf("bundle into a missing directory: exit %d: %s", code, stderr)
	}
}
