package harness

import (
	"fmt"
	"os"
	"slices"
	"sync"
)

// ProgramTB is the TB of a program rather than a test (the demo, the
// bench): Logf prints to stderr, Fatalf prints, runs the cleanups and exits
// 1, and Close runs the cleanups registered so far, last first.
type ProgramTB struct {
	mu       sync.Mutex
	cleanups []func()
}

// NewProgramTB returns a ProgramTB; defer its Close.
func NewProgramTB() *ProgramTB { return &ProgramTB{} }

// Helper does nothing: a program has no test log to attribute lines in.
func (p *ProgramTB) Helper() {}

// Logf prints a line to stderr.
func (p *ProgramTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// Fatalf prints the message, cleans up and exits 1. Safe from any
// goroutine: the first caller cleans up, and the process ends.
func (p *ProgramTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fatal: "+format+"\n", args...)
	p.Close()
	os.Exit(1)
}

// TempDir makes a directory removed at Close.
func (p *ProgramTB) TempDir() string {
	dir, err := os.MkdirTemp("", "sriov-stable-")
	if err != nil {
		p.Fatalf("temp dir: %v", err)
	}
	p.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Cleanup registers f to run at Close.
func (p *ProgramTB) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

// Close runs the registered cleanups, last registered first, once each.
func (p *ProgramTB) Close() {
	p.mu.Lock()
	fs := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}
