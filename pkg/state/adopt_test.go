package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// saveOwned saves r in s as ADD does: the VF's lock indexes it as owner.
func saveOwned(t *testing.T, s *Store, r *Record) {
	t.Helper()
	l, err := s.LockVF(r.PCI)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if err := l.SetOwner(r.Key(), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
}

func recordOf(network, container, pci string) *Record {
	r := sampleRecord(network, container, "net1")
	r.PCI = pci
	return r
}

func TestAdoptMovesOneNetworksRecords(t *testing.T) {
	old, cur := NewStore(t.TempDir()), NewStore(filepath.Join(t.TempDir(), "run"))
	a1 := recordOf("ib-a", "c1", "0000:18:00.2")
	// A network name long enough that the record's file name is a hash.
	a2 := recordOf("ib-a"+strings.Repeat("x", 200), "c2", "0000:18:00.3")
	b1 := recordOf("ib-b", "c3", "0000:18:00.4")
	for _, r := range []*Record{a1, a2, b1} {
		saveOwned(t, old, r)
	}
	if !strings.HasPrefix(filepath.Base(old.Path(a2.Key())), "h-") {
		t.Fatalf("test setup: %s is not a hashed record name", old.Path(a2.Key()))
	}

	moved, err := cur.Adopt(old.Dir(), "ib-a")
	if err != nil || moved != 1 {
		t.Fatalf("Adopt(ib-a) = %d, %v; want 1, nil", moved, err)
	}
	got, err := cur.Load(a1.Key())
	if err != nil {
		t.Fatalf("adopted record: %v", err)
	}
	if diff := cmp.Diff(a1, got); diff != "" {
		t.Errorf("adopted record differs (-want +got):\n%s", diff)
	}
	if _, err := old.Load(a1.Key()); !errors.Is(err, ErrNotFound) {
		t.Errorf("old store still has the adopted record: %v", err)
	}
	// The VF's new lock names the adopted record as owner, the old one no
	// longer does.
	assertClaims(t, cur, a1.PCI, a1)
	assertClaims(t, old, a1.PCI)
	assertIndex(t, cur, a1.PCI, indexOwner+fileName(a1.Key())+" guid "+a1.NodeGUID)
	assertIndex(t, old, a1.PCI, indexFree)
	// A hashed name of another network ("ib-a" + x…) and network b stay.
	for _, r := range []*Record{a2, b1} {
		if _, err := old.Load(r.Key()); err != nil {
			t.Errorf("record %s of another network was taken: %v", r.Key(), err)
		}
		if _, err := cur.Load(r.Key()); !errors.Is(err, ErrNotFound) {
			t.Errorf("record %s of another network was adopted: %v", r.Key(), err)
		}
	}

	if moved, err := cur.Adopt(old.Dir(), "ib-a"); err != nil || moved != 0 {
		t.Errorf("second Adopt(ib-a) = %d, %v; want 0, nil", moved, err)
	}
	for _, network := range []string{a2.Network, "ib-b"} {
		if moved, err := cur.Adopt(old.Dir(), network); err != nil || moved != 1 {
			t.Fatalf("Adopt(%.8s…) = %d, %v; want 1, nil", network, moved, err)
		}
	}
	if _, err := os.Stat(old.recordDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old attachments/ left after its last record was adopted: %v", err)
	}
	if moved, err := cur.Adopt(old.Dir(), "ib-a"); err != nil || moved != 0 {
		t.Errorf("Adopt with nothing left = %d, %v; want 0, nil", moved, err)
	}
}

func assertClaims(t *testing.T, s *Store, pci string, want ...*Record) {
	t.Helper()
	l, err := s.LockVF(pci)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	got, err := l.Claims(pci, Key{Network: "someone", ContainerID: "else", IfName: "net9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) == 1 && got[0].Key() != want[0].Key() {
		t.Errorf("claims on %s in %s = %v, want %v", pci, s.Dir(), got, want)
	}
}

func assertIndex(t *testing.T, s *Store, pci, want string) {
	t.Helper()
	l, err := s.LockVF(pci)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if got, err := l.readIndex(); err != nil || got != want {
		t.Errorf("owner index of %s in %s = %q, %v; want %q", pci, s.Dir(), got, err, want)
	}
}

// A record the new store already holds for the key is newer (written by
// this plugin after the upgrade): it wins, and the old one goes.
func TestAdoptKeepsNewerRecord(t *testing.T) {
	old, cur := NewStore(t.TempDir()), NewStore(t.TempDir())
	stale, fresh := recordOf("ib-a", "c1", "0000:18:00.2"), recordOf("ib-a", "c1", "0000:18:00.2")
	fresh.MTU = 2044
	saveOwned(t, old, stale)
	saveOwned(t, cur, fresh)
	if moved, err := cur.Adopt(old.Dir(), "ib-a"); err != nil || moved != 0 {
		t.Fatalf("Adopt = %d, %v; want 0, nil", moved, err)
	}
	if got, err := cur.Load(fresh.Key()); err != nil || got.MTU != 2044 {
		t.Errorf("record after Adopt = %+v, %v; want the newer one (MTU 2044)", got, err)
	}
	if _, err := old.Load(stale.Key()); !errors.Is(err, ErrNotFound) {
		t.Errorf("old record left: %v", err)
	}
}

func TestAdoptWithoutOldDir(t *testing.T) {
	cur := NewStore(t.TempDir())
	if moved, err := cur.Adopt(filepath.Join(t.TempDir(), "never"), "ib-a"); err != nil || moved != 0 {
		t.Errorf("Adopt from a missing dir = %d, %v; want 0, nil", moved, err)
	}
	if _, err := os.Stat(cur.recordDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Adopt with nothing to adopt created %s: %v", cur.recordDir(), err)
	}
}
