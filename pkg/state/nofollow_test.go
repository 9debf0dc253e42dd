package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// TestNoSymlinkFollowed puts a symlink where a record, a lock or the log
// file goes, pointing at a file outside the state dir. Each open must be
// refused (safefile's ErrNotRegular for records and locks, ELOOP for the
// log) and leave the target as it was: never read as a record,
// created, locked or written through the link.
func TestNoSymlinkFollowed(t *testing.T) {
	s := NewStore(t.TempDir())
	outside := t.TempDir()
	rec := sampleRecord("ib-net", "c0ffee", "net1")
	link := func(t *testing.T, at, target string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("record", func(t *testing.T) {
		// A whole, valid record elsewhere: followed, it would load.
		elsewhere := NewStore(outside)
		if err := elsewhere.Save(rec); err != nil {
			t.Fatal(err)
		}
		link(t, s.Path(rec.Key()), elsewhere.Path(rec.Key()))
		if r, err := s.Load(rec.Key()); !errors.Is(err, safefile.ErrNotRegular) {
			t.Errorf("Load through a symlink = %+v, %v; want it refused as not a regular file", r, err)
		}
	})
	t.Run("lock", func(t *testing.T) {
		target := filepath.Join(outside, "created-through-lock")
		link(t, filepath.Join(s.Dir(), "locks", "0000:18:00.2.lock"), target)
		if l, err := s.LockVF("0000:18:00.2"); !errors.Is(err, safefile.ErrNotRegular) {
			if l != nil {
				l.Unlock()
			}
			t.Errorf("LockVF through a symlink: %v; want it refused as not a regular file", err)
		}
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("LockVF created %s through the symlink (%v)", target, err)
		}
	})
	t.Run("log", func(t *testing.T) {
		target := filepath.Join(outside, "crontab")
		if err := os.WriteFile(target, []byte("kept\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := filepath.Join(t.TempDir(), "plugin.log")
		link(t, at, target)
		if f, err := OpenLog(at); !errors.Is(err, unix.ELOOP) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenLog through a symlink: %v; want ELOOP", err)
		}
		if b, _ := os.ReadFile(target); string(b) != "kept\n" {
			t.Errorf("the symlink's target holds %q", b)
		}
	})
}
