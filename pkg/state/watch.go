package state

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// WatchRecords starts a watch on the store's records directory (see
// RecordWatch).
func (s *Store) WatchRecords() (*RecordWatch, error) { return newRecordWatch(s.recordDir(), s.dir) }

// RecordWatch is an inotify watch on the records directory, or, until that
// exists, on the state directory for its creation: it says which record
// files were written, renamed or removed. inotify costs nothing
// while nothing changes and tells at once; listing the directory every
// poll interval would read all records each time.
type RecordWatch struct {
	records, parent string
	f               *os.File
	mu              sync.Mutex
	wdRecords       int // -1: not watched
	wdParent        int
	buf             [64 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)]byte
}

func newRecordWatch(records, parent string) (*RecordWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking, so reads wait in the runtime's poller and Close ends them.
	w := &RecordWatch{records: records, parent: parent, f: os.NewFile(uintptr(fd), "inotify"), wdRecords: -1, wdParent: -1}
	w.Ensure()
	return w, nil
}

// Ensure watches the records directory if it exists, else its parent for
// its creation. Safe to call at any time.
func (w *RecordWatch) Ensure() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wdRecords >= 0 {
		return
	}
	fd := int(w.f.Fd())
	wd, err := unix.InotifyAddWatch(fd, w.records,
		unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_DELETE|unix.IN_CLOSE_WRITE|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
	if err == nil {
		w.wdRecords = wd
		return
	}
	if w.wdParent < 0 {
		if wd, err := unix.InotifyAddWatch(fd, w.parent, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err == nil {
			w.wdParent = wd
		}
	}
}

// Close ends the watch; a Next waiting returns os.ErrClosed.
func (w *RecordWatch) Close() { w.f.Close() }

// Next waits for the next events and returns the record files (names in
// the records directory, for Store.LoadFile) that may have appeared,
// changed or gone, or all when every record must be read again.
func (w *RecordWatch) Next() (names []string, all bool, err error) {
	for {
		n, err := w.f.Read(w.buf[:])
		if err != nil {
			return nil, false, err
		}
		if names, all = w.changed(w.buf[:n]); all || len(names) > 0 {
			return names, all, nil
		}
	}
}

// changed parses inotify events and returns the record files that may
// have appeared, changed or gone, each once, or all when every record
// must be read again (the records directory came or went, events were
// lost); it re-arms the watches as directories come and go.
func (w *RecordWatch) changed(buf []byte) (names []string, all bool) {
	for len(buf) >= unix.SizeofInotifyEvent {
		wd := int(binary.NativeEndian.Uint32(buf[0:4]))
		mask := binary.NativeEndian.Uint32(buf[4:8])
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))
		if end > len(buf) {
			break
		}
		name := strings.TrimRight(string(buf[unix.SizeofInotifyEvent:end]), "\x00")
		buf = buf[end:]
		w.mu.Lock()
		wdRecords, wdParent := w.wdRecords, w.wdParent
		if mask&unix.IN_IGNORED != 0 && wd == wdRecords {
			w.wdRecords = -1 // the records directory went
		}
		w.mu.Unlock()
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			all = true
		case wd == wdParent && name == filepath.Base(w.records):
			all = true
		case wd == wdRecords && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			all = true
		case wd == wdRecords && isRecordFile(name):
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	w.Ensure()
	return names, all
}
