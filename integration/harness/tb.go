package harness

import (
	"fmt"
	"os"
	"slices"
)

// ProgramTB lets a plain program (the demo, the bench) use the harness: it
// fails by panicking with a *Failure, keeps temp dirs and runs cleanups in
// reverse order on Close.
type ProgramTB struct {
	cleanups []func()
	dirs     []string
}

// Failure is what ProgramTB.Fatalf panics with.
type Failure struct{ Msg string }

func (f *Failure) Error() string { return f.Msg }

// NewProgramTB returns a TB for a program; call Close when done.
func NewProgramTB() *ProgramTB { return &ProgramTB{} }

// Helper does nothing: there is no test runner to hide frames from.
func (p *ProgramTB) Helper() {}

// Fatalf panics with a *Failure; Run turns it back into an error.
func (p *ProgramTB) Fatalf(format string, args ...any) {
	panic(&Failure{Msg: fmt.Sprintf(format, args...)})
}

// Logf prints to stderr.
func (p *ProgramTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// TempDir makes a directory removed on Close.
func (p *ProgramTB) TempDir() string {
	d, err := os.MkdirTemp("", "sriov-stable-")
	if err != nil {
		p.Fatalf("temp dir: %v", err)
	}
	p.dirs = append(p.dirs, d)
	return d
}

// Cleanup registers f to run on Close.
func (p *ProgramTB) Cleanup(f func()) { p.cleanups = append(p.cleanups, f) }

// Close runs the cleanups in reverse order and removes the temp dirs.
func (p *ProgramTB) Close() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
	for _, d := range p.dirs {
		os.RemoveAll(d)
	}
}

// Run calls f and returns a Fatalf inside it as an error.
func (p *ProgramTB) Run(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if fail, ok := r.(*Failure); ok {
				err = fail
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}
