package safefiletest

import (
	"os"
	"sync"
	"syscall"
	"testing"
)

// FIFOAt replaces the file at path with a FIFO, so that a read of it does
// not return, as a port-state read of a wedged HCA does not: with writer,
// something holds the FIFO open and never writes (open returns, read
// blocks); without, nothing opened it (open itself blocks). release, also
// run at cleanup, puts the file back and lets every blocked reader go.
//
// The project's reads refuse files that are not regular (issue 24, A1): a
// FIFO is refused instead of read. The tests using this assert what holds
// either way, that the agent goes on for every other VF and names this
// one.
func FIFOAt(t testing.TB, path string, writer bool) (release func()) {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	held := path + ".fifo"
	if err := syscall.Mkfifo(held, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	var w *os.File
	if writer {
		// O_RDWR opens a FIFO without waiting for a reader.
		if w, err = os.OpenFile(held, os.O_RDWR, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(held, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, held); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			// The regular file first, so nothing opens the FIFO again; then
			// a writer comes and goes: readers blocked in open or read get
			// end of file.
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, content, 0o644); err != nil {
				t.Error(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Error(err)
			}
			if f, err := os.OpenFile(held, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			if w != nil {
				w.Close()
			}
			os.Remove(held)
		})
	}
	t.Cleanup(release)
	return release
}
