package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

// hostileRecords puts, beside the records of s, what must be refused: a
// FIFO named like a record, a link to /dev/zero, a link to a good record
// in another directory, and 100 MB of junk (sparse). It returns their paths
// with the sentinel each must be refused with.
func hostileRecords(t *testing.T, s *Store) map[string]error {
	t.Helper()
	if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := NewStore(t.TempDir())
	outside := sampleRecord("ib", "outside", "net1")
	if err := elsewhere.Save(outside); err != nil {
		t.Fatal(err)
	}
	in := func(name string) string { return filepath.Join(s.recordDir(), name) }
	safefiletest.FIFO(t, in("ib_fifo_net1.json"))
	safefiletest.Symlink(t, "/dev/zero", in("ib_zero_net1.json"))
	safefiletest.Symlink(t, elsewhere.Path(outside.Key()), in("ib_outside_net1.json"))
	safefiletest.Sparse(t, in("ib_junk_net1.json"), 100<<20)
	return map[string]error{
		in("ib_fifo_net1.json"):    safefile.ErrNotRegular,
		in("ib_zero_net1.json"):    safefile.ErrNotRegular,
		in("ib_outside_net1.json"): safefile.ErrNotRegular,
		in("ib_junk_net1.json"):    safefile.ErrTooLarge,
	}
}

// joined returns the errors List joined, one per unreadable file.
func joined(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return nil
}

// wantRefused checks that errs holds one error per hostile file, each
// naming its file and wrapping the sentinel it was refused with.
func wantRefused(t *testing.T, errs []error, hostile map[string]error) {
	t.Helper()
	if len(errs) != len(hostile) {
		t.Errorf("%d unreadable files reported, want %d: %v", len(errs), len(hostile), errs)
	}
	for path, sentinel := range hostile {
		found := false
		for _, err := range errs {
			if strings.Contains(err.Error(), path+" ") {
				found = true
				if !errors.Is(err, sentinel) {
					t.Errorf("%s: %v, want %v", filepath.Base(path), err, sentinel)
				}
			}
		}
		if !found {
			t.Errorf("no error names %s: %v", path, errs)
		}
	}
}

// TestListRefusesHostileRecords: List returns the good records at once and
// reports each hostile file as unreadable, by name; Load of one is an
// error, not a hang.
func TestListRefusesHostileRecords(t *testing.T) {
	s := NewStore(t.TempDir())
	for _, c := range []string{"c1", "c2"} {
		if err := s.Save(sampleRecord("ib", c, "net1")); err != nil {
			t.Fatal(err)
		}
	}
	hostile := hostileRecords(t, s)
	var recs []*Record
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "List", func() { recs, err = s.List() })
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key().String())
	}
	if diff := cmp.Diff([]string{"ib/c1/net1", "ib/c2/net1"}, keys); diff != "" {
		t.Errorf("List keys (-want +got):\n%s", diff)
	}
	wantRefused(t, joined(err), hostile)

	safefiletest.Within(t, safefiletest.Prompt, "Load", func() { _, err = s.Load(Key{"ib", "fifo", "net1"}) })
	if !errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, ErrNotFound) {
		t.Errorf("Load of a FIFO record: %v, want ErrNotRegular", err)
	}
}

// TestClaimsWithHostileOwner: a lock whose index names a FIFO as the VF's
// owner is not trusted; Claims reads every record instead, reports the
// hostile ones and finds the real claim.
func TestClaimsWithHostileOwner(t *testing.T) {
	s := NewStore(t.TempDir())
	claim := sampleRecord("ib", "c1", "net1")
	if err := s.Save(claim); err != nil {
		t.Fatal(err)
	}
	hostile := hostileRecords(t, s)
	l, err := s.LockVF(claim.PCI)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if err := l.SetOwner(Key{"ib", "fifo", "net1"}, ""); err != nil {
		t.Fatal(err)
	}
	var recs []*Record
	safefiletest.Within(t, safefiletest.Prompt, "Claims", func() { recs, err = l.Claims(claim.PCI, Key{"ib", "new", "net1"}) })
	if len(recs) != 1 || recs[0].Key() != claim.Key() {
		t.Errorf("Claims = %v, want the record of %s", recs, claim.Key())
	}
	wantRefused(t, joined(err), hostile)
}

// TestLockVFRefusesHostileLockFile: a lock file that is a FIFO or a link is
// refused, and nothing is written through the link (the lock's index would
// land in whatever it points at).
func TestLockVFRefusesHostileLockFile(t *testing.T) {
	s := NewStore(t.TempDir())
	if err := os.MkdirAll(s.lockDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	safefiletest.FIFO(t, filepath.Join(s.lockDir(), "0000:18:00.2.lock"))
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	safefiletest.Symlink(t, victim, filepath.Join(s.lockDir(), "0000:18:00.3.lock"))
	dangling := filepath.Join(t.TempDir(), "created-through-the-link")
	safefiletest.Symlink(t, dangling, filepath.Join(s.lockDir(), "0000:18:00.4.lock"))

	for _, pci := range []string{"0000:18:00.2", "0000:18:00.3", "0000:18:00.4"} {
		var l *VFLock
		var err error
		safefiletest.Within(t, safefiletest.Prompt, "LockVF", func() { l, err = s.LockVF(pci) })
		if err == nil {
			_ = l.SetOwner(Key{"ib", "c1", "net1"}, "")
			l.Unlock()
		}
		if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), pci+".lock") {
			t.Errorf("LockVF(%s) over a hostile lock file: %v, want ErrNotRegular naming it", pci, err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the link's target now holds %q (%v)", b, err)
	}
	if _, err := os.Lstat(dangling); err == nil {
		t.Error("a dangling link's target was created")
	}
}

// TestHostileGUIDIndex: a saved GUID index that is a FIFO is an error at
// once (ADD then scans); the next save replaces it.
func TestHostileGUIDIndex(t *testing.T) {
	s := NewStore(t.TempDir())
	path := filepath.Join(s.Dir(), guidIndexFile)
	safefiletest.FIFO(t, path)
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "LoadGUIDIndex", func() { _, err = s.LoadGUIDIndex() })
	if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), path+" is a FIFO") {
		t.Errorf("LoadGUIDIndex of a FIFO: %v, want ErrNotRegular naming it", err)
	}
	if err := s.SaveGUIDIndex([]byte("index\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := s.LoadGUIDIndex(); err != nil || string(b) != "index\n" {
		t.Errorf("after a save: %q, %v", b, err)
	}
	safefiletest.Sparse(t, path, 100<<20)
	if _, err := s.LoadGUIDIndex(); !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("LoadGUIDIndex of 100 MB: %v, want ErrTooLarge", err)
	}
}

// TestAdoptWithHostileLegacyRecord: a FIFO among the legacy directory's
// records of the network is reported, and the network's good records are
// adopted all the same.
func TestAdoptWithHostileLegacyRecord(t *testing.T) {
	old, cur := NewStore(t.TempDir()), NewStore(filepath.Join(t.TempDir(), "run"))
	good := recordOf("ib-a", "c1", "0000:18:00.2")
	saveOwned(t, old, good)
	fifo := filepath.Join(old.recordDir(), "ib-a_fifo_net1.json")
	safefiletest.FIFO(t, fifo)
	var moved int
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "Adopt", func() { moved, err = cur.Adopt(old.Dir(), "ib-a") })
	if moved != 1 || !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), fifo+" is a FIFO") {
		t.Errorf("Adopt = %d, %v; want 1 and an error naming the FIFO", moved, err)
	}
	if _, err := cur.Load(good.Key()); err != nil {
		t.Errorf("the good record was not adopted: %v", err)
	}
}

// TestGUIDDirectoryOwnerHostile: an entry of the GUID directory is read
// with readlink, never followed; the record it names is read as any
// record, so a FIFO there is an error, not a hang.
func TestGUIDDirectoryOwnerHostile(t *testing.T) {
	s := NewStore(t.TempDir())
	const guid = "a288:c2ff:fe18:0000"
	k := Key{"ib", "c1", "net1"}
	l, err := s.LockVF("0000:18:00.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetOwner(k, guid); err == nil {
		err = l.IndexGUID(k, guid)
	}
	l.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	safefiletest.FIFO(t, s.Path(k))
	owners, err := s.OwnersOf(guid)
	if err != nil || len(owners) != 1 {
		t.Fatalf("OwnersOf = %v, %v; want the one entry", owners, err)
	}
	safefiletest.Within(t, safefiletest.Prompt, "Owner", func() { _, err = s.Owner(owners[0]) })
	if !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("Owner of an entry naming a FIFO: %v, want ErrNotRegular", err)
	}
}
