package state

import (
	"fmt"
	"path/filepath"
)

// FileName is the name of a key's record file in the records directory.
func FileName(k Key) string { return fileName(k) }

// LoadFile reads the record file name of the records directory, as a watch
// of the directory names it, so that a change to one record is read
// without listing the others; ErrNotFound when it is gone. A name that is
// not a record file's (a temp file, a path) is an error.
func (s *Store) LoadFile(name string) (*Record, error) {
	if name != filepath.Base(name) || !isRecordFile(name) {
		return nil, fmt.Errorf("%q is not the name of a record file", name)
	}
	return readRecord(filepath.Join(s.recordDir(), name))
}
