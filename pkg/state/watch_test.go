package state

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// next is the watch's next answer, or a failure after 5 s.
func next(t *testing.T, w *RecordWatch) (names []string, all bool) {
	t.Helper()
	type answer struct {
		names []string
		all   bool
		err   error
	}
	ch := make(chan answer, 1)
	go func() {
		n, a, err := w.Next()
		ch <- answer{n, a, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Next: %v", a.err)
		}
		return a.names, a.all
	case <-time.After(5 * time.Second):
		t.Fatal("Next: nothing within 5 s")
	}
	return nil, false
}

// A watch started before the records directory exists says "read all"
// when it appears; then each record saved, replaced or deleted is named,
// and temp files are not; Close ends a Next that waits.
func TestRecordWatch(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "state"))
	if err := os.Mkdir(s.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := s.WatchRecords()
	if err != nil {
		t.Fatal(err)
	}
	rec := sampleRecord("ib-net", "c0ffee", "net1")
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	if _, all := next(t, w); !all {
		t.Fatal("the records directory appeared: want every record read again")
	}
	w.Ensure()
	file := FileName(rec.Key())
	rec.MTU = 2044
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	if names, all := next(t, w); all || !slices.Equal(names, []string{file}) {
		t.Errorf("after a save: %q (all %v), want [%s]", names, all, file)
	}
	if err := os.WriteFile(filepath.Join(s.recordDir(), ".tmp-x.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(rec.Key()); err != nil {
		t.Fatal(err)
	}
	if names, all := next(t, w); all || !slices.Equal(names, []string{file}) {
		t.Errorf("after a temp file and a delete: %q (all %v), want [%s]", names, all, file)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := w.Next()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("Next after Close: %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Next")
	}
}
