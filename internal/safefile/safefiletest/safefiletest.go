// Package safefiletest makes the hostile files the tests put where a record,
// a lock or a sysfs attribute belongs, and bounds how long a read of them may
// take. A FIFO is how a test stands for a read that never returns: opened
// for reading without O_NONBLOCK, it waits for a writer forever.
package safefiletest

import (
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Prompt is how long a refused read may take. A refusal is a few system
// calls; the bound only has to tell that from a hang on a loaded machine.
const Prompt = 5 * time.Second

// FIFO puts a FIFO at path, replacing any file there. When the test ends it
// opens the FIFO for writing once, which releases a reader stuck opening it
// (code that does not open non-blocking), so a failed test does not leave a
// goroutine blocked for the rest of the run.
func FIFO(tb testing.TB, path string) {
	tb.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("replace %s with a FIFO: %v", path, err)
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		tb.Fatalf("make FIFO %s: %v", path, err)
	}
	tb.Cleanup(func() { Release(path) })
}

// Release opens the FIFO at path for writing and closes it: a reader
// waiting in open(2) gets it, then reads end of file. Without such a reader
// it does nothing.
func Release(path string) {
	if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}

// Symlink puts a symbolic link to target at path, replacing any file there.
func Symlink(tb testing.TB, target, path string) {
	tb.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("replace %s with a link: %v", path, err)
	}
	if err := os.Symlink(target, path); err != nil {
		tb.Fatal(err)
	}
}

// Sparse puts a file of size bytes at path that takes no space: what a
// junk file of 100 MB costs a test is its inode.
func Sparse(tb testing.TB, path string, size int64) {
	tb.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		tb.Fatal(err)
	}
}

// Within runs fn and fails the test if it has not returned within d (fn
// keeps running: it must not use tb). It reports how long fn took.
func Within(tb testing.TB, d time.Duration, what string, fn func()) time.Duration {
	tb.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(d):
		tb.Fatalf("%s did not return within %v: it hangs on a file it should have refused", what, d)
		return d
	}
}
