package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

// TestKernelLogTextIsUntrusted: a kernel log given as a path that is a
// FIFO is refused at once, naming it; a text log larger than the cap is
// read from its end, starting at a whole line.
func TestKernelLogTextIsUntrusted(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "kern.fifo")
	safefiletest.FIFO(t, fifo)
	safefiletest.Within(t, safefiletest.Prompt, "reading a FIFO as the kernel log", func() {
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
