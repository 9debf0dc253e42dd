package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Adopt moves the records of network from an older state directory (the
// one an earlier default put them in) into s, so that DEL, CHECK and the
// ownership check of attachments made before an upgrade find them where the
// plugin now looks. It is cheap when there is nothing to adopt: one failed
// open of <old>/attachments.
//
// Only network's records move: another network's configuration may name
// old as its stateDir on purpose. Each record moves under the locks of its
// VF in both directories, so a plugin still running from before the upgrade
// (which locks only in old) and one running now (only in s) never see it
// half moved, and two adopters move it once. A record s already holds for
// the same key is newer and is kept. Once old's attachments/ is empty it is
// removed; its lock files stay, since a process of the older plugin may
// hold one.
func (s *Store) Adopt(old, network string) (moved int, err error) {
	from := NewStore(old)
	entries, err := os.ReadDir(from.recordDir())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // the usual case, on every run: one failed open
	}
	if err != nil {
		return 0, fmt.Errorf("list records in %s: %w", from.recordDir(), err)
	}
	var errs []error
	prefix := escape(network) + "_"
	for _, e := range entries {
		name := e.Name()
		if !isRecordFile(name) || !strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "h-") {
			continue // another network's (a hashed name must be read to tell)
		}
		r, err := readRecord(filepath.Join(from.recordDir(), name))
		if err != nil {
			if !errors.Is(err, ErrNotFound) && strings.HasPrefix(name, prefix) {
				errs = append(errs, err)
			}
			continue
		}
		if r.Network != network {
			continue
		}
		ok, err := s.adoptOne(from, r.Key(), r.PCI)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			moved++
		}
	}
	_ = os.Remove(from.recordDir()) // fails while any record or a writer's temp file is left
	return moved, errors.Join(errs...)
}

// adoptOne moves k's record (of VF pci) from old into s under both locks
// of the VF: old's first, as the older plugin takes only that one.
func (s *Store) adoptOne(old *Store, k Key, pci string) (bool, error) {
	oldLock, err := old.LockVF(pci)
	if err != nil {
		return false, err
	}
	defer oldLock.Unlock()
	newLock, err := s.LockVF(pci)
	if err != nil {
		return false, err
	}
	defer newLock.Unlock()
	r, err := old.Load(k) // again, under the locks: a DEL may have removed it
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	moved := false
	if _, err := s.Load(k); errors.Is(err, ErrNotFound) {
		if owner, err := newLock.readIndex(); err == nil && (owner == "" || owner == indexFree) {
			if err := newLock.SetOwner(k, r.NodeGUID); err != nil {
				return false, err
			}
		}
		if err := s.Save(r); err != nil {
			return false, fmt.Errorf("adopt record %s: %w", k, err)
		}
		moved = true
	}
	if err := old.Delete(k); err != nil {
		return moved, err
	}
	return moved, oldLock.Free(k)
}
