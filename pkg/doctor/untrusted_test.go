package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

// within runs fn and fails the test when it does not return in 10 s: the
// reads below must refuse what they cannot read, never wait on it.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked for 10 s", what)
	}
}

// TestKernelLogTextIsUntrusted: a kernel log given as a path that is a
// FIFO is refused at once, naming it; a text log larger than the cap is
// read from its end, starting at a whole line.
func TestKernelLogTextIsUntrusted(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "kern.fifo")
	safefiletest.FIFO(t, fifo)
	within(t, "reading a FIFO as the kernel log", func() {
		_, err := readKernelLog(fifo)
		if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), fifo) {
			t.Errorf("readKernelLog(FIFO) = %v, want a refusal naming it", err)
		}
	})

	big := filepath.Join(dir, "kern.log")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	const line = "Dec  5 18:00:00 node kernel: mlx5_core 0000:18:00.0: message %08d padding padding padding\n"
	var n int
	for size := 0; size <= maxKernelLogText+1<<20; n++ {
		k, err := fmt.Fprintf(f, line, n)
		if err != nil {
			t.Fatal(err)
		}
		size += k
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := readKernelLog(big)
	if err != nil {
		t.Fatal(err)
	}
	per := len(fmt.Sprintf(line, 0))
	if want := maxKernelLogText / per; len(lines) < want-1 || len(lines) > want+1 {
		t.Errorf("read %d lines of a %d-line log, want about the %d its last %d bytes hold", len(lines), n, want, maxKernelLogText)
	}
	if first := lines[0]; !strings.HasPrefix(first, "Dec  5 ") {
		t.Errorf("first line read %q does not start a line", first)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("message %08d", n-1)) {
		t.Errorf("last line read %q, want the log's last", last)
	}
}

// TestLinkFilesAreUntrusted: among the .link files, a FIFO and a file over
// the cap are reported and skipped without blocking, a link to /dev/null
// (a masked file) is skipped in silence, and the regular file beside them
// is still read.
func TestLinkFilesAreUntrusted(t *testing.T) {
	dir := t.TempDir()
	good := "[Match]\nPath=pci-0000:18:00.2\n[Link]\nName=ibs1f0v0\nAlternativeName=vf-0000:18:00.2\n"
	if err := os.WriteFile(filepath.Join(dir, "10-good.link"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	safefiletest.FIFO(t, filepath.Join(dir, "20-fifo.link"))
	if err := os.Symlink(os.DevNull, filepath.Join(dir, "30-masked.link")); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("# padding\n", maxLinkFileSize/10+1)
	if err := os.WriteFile(filepath.Join(dir, "40-huge.link"), []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	var names map[string]hostName
	var err error
	within(t, "reading the .link files", func() { names, err = readLinkFiles(dir) })
	if got := names["0000:18:00.2"]; got.name != "ibs1f0v0" || got.altName != "vf-0000:18:00.2" || len(names) != 1 {
		t.Errorf("names %+v, want the good file's alone", names)
	}
	if !errors.Is(err, safefile.ErrNotRegular) || !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("error %v, want the FIFO and the oversized file named", err)
	}
	if err != nil && strings.Contains(err.Error(), "30-masked.link") {
		t.Errorf("the masked file is reported: %v", err)
	}
}
