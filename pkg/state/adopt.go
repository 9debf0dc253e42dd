package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
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
	names, err := recordNames(from.recordDir())
	if err != nil || len(names) == 0 {
		if err == nil {
			_ = unix.Rmdir(from.recordDir()) // fails while a writer's temp file is there
		}
		return 0, err
	}
	var errs []error
	prefix := escape(network) + "_"
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "h-") {
			continue // another network's (a hashed name must be read to tell)
		}
		r, err := readRecord(from.recordDir() + "/" + name)
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
	if rest, err := recordNames(from.recordDir()); err == nil && len(rest) == 0 {
		_ = unix.Rmdir(from.recordDir())
	}
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
			if err := newLock.SetOwner(k); err != nil {
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

// recordNames lists the record files of a records directory; none when it
// does not exist.
func recordNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list records in %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if isRecordFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
