// Package safefile opens the files the plugin and the agent read from their
// state directory and from sysfs without trusting them: only a regular file,
// opened non-blocking so that a FIFO cannot stall the open, and read up to a
// size cap. A FIFO, a device node, a socket or a directory where a record or
// an attribute belongs is an error naming what was found, never a hang or an
// unbounded read.
//
// It is linked into the CNI binary: standard library and x/sys/unix only, and
// no more work per file than os.ReadFile does (one fstat, which os.ReadFile
// makes too).
package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Sentinels for errors.Is: what the file at a path was refused for.
var (
	// ErrNotRegular: the path is a FIFO, socket, device node, directory,
	// or (where the last element is not followed) a symbolic link.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more bytes than the caller's cap.
	ErrTooLarge = errors.New("file too large")
)

// refusal is a refused file: its message names the path and what was found
// there ("/run/x.json is a FIFO, not a regular file"); it Is its sentinel.
type refusal struct {
	path, found string
	sentinel    error
}

func (e *refusal) Error() string { return e.path + " " + e.found }
func (e *refusal) Unwrap() error { return e.sentinel }

// ReadFile reads the regular file at path, at most limit bytes, without
// following a symbolic link in its last element (the directories on the way
// may be links, as sysfs's bus/pci/devices/<pci> are). It reads no more than
// limit+1 bytes whatever the file's size, and does not rely on st_size: sysfs
// reports 4096 for every attribute.
// Equivalent to: test -f $path -a ! -L $path && head -c $limit $path
func ReadFile(path string, limit int64) ([]byte, error) {
	return readFile(path, limit, unix.O_NOFOLLOW)
}

// ReadFileFollow is ReadFile for a file an operator names, which may be a
// symbolic link (a ConfigMap mount makes node.yaml one): the link is
// followed, and what it leads to must still be a regular file.
func ReadFileFollow(path string, limit int64) ([]byte, error) {
	return readFile(path, limit, 0)
}

// OpenFile opens path as os.OpenFile does, with O_NOFOLLOW and O_NONBLOCK
// added, and refuses anything but a regular file. The monitor keeps port
// files open this way; lock files are opened with O_RDWR|O_CREATE (a
// dangling link is refused too, not created through).
func OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := open(path, flag|unix.O_NOFOLLOW, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	if _, err := regular(fd, path); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Open opens path for reading as OpenFile does.
func Open(path string) (*os.File, error) { return OpenFile(path, os.O_RDONLY, 0) }

// OpenFollow opens for reading a file an operator names, which may be a
// symbolic link (followed): non-blocking, and refused unless what it leads
// to is a regular file. It returns the file's size as fstat reports it.
func OpenFollow(path string) (*os.File, int64, error) {
	fd, err := open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	n, err := regular(fd, path)
	if err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), path), n, nil
}

// open opens path non-blocking (a FIFO's open returns at once instead of
// waiting for a writer), close-on-exec, retrying on EINTR.
func open(path string, flag int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP) && flag&unix.O_NOFOLLOW != 0, errors.Is(err, unix.ENXIO):
			// A link in the last element (O_NOFOLLOW), or a socket or a
			// FIFO without a reader (opened for writing): say which.
			if r := refuseLstat(path); r != nil {
				return -1, r
			}
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
}

// regular refuses the open file fd unless it is a regular file, and
// returns its size as stat reports it.
func regular(fd int, path string) (int64, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstat(fd, &st)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return 0, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, notRegular(path, st.Mode)
	}
	return st.Size, nil
}

// refuseLstat explains a failed open from what lstat finds at path: nil
// when that is a regular file or cannot be told.
func refuseLstat(path string) error {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	return notRegular(path, st.Mode)
}

// notRegular names what a path of mode m is. Where path is a link that was
// followed, it names the link's target too.
func notRegular(path string, m uint32) error {
	kind := "a file of mode " + fmt.Sprintf("%#o", m&unix.S_IFMT)
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		kind = "a FIFO"
	case unix.S_IFSOCK:
		kind = "a socket"
	case unix.S_IFCHR:
		kind = "a character device"
	case unix.S_IFBLK:
		kind = "a block device"
	case unix.S_IFDIR:
		kind = "a directory"
	case unix.S_IFLNK:
		kind = "a symbolic link"
	}
	if target, err := os.Readlink(path); err == nil {
		if m&unix.S_IFMT == unix.S_IFLNK {
			kind += " to " + target
		} else {
			kind = "a symbolic link to " + target + ", " + kind
		}
	}
	return &refusal{path: path, found: "is " + kind + ", not a regular file", sentinel: ErrNotRegular}
}

// readFile opens path (with extra flags), checks that it is a regular file
// and reads it up to limit bytes.
func readFile(path string, limit int64, flag int) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY|flag, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	stSize, err := regular(fd, path)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, firstSize(stSize, limit))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, &refusal{path: path, found: "is larger than " + size(limit), sentinel: ErrTooLarge}
			}
			buf = grow(buf, limit)
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// firstSize is the first buffer's capacity: the file's size and one byte
// (to see the end in one read), at most limit+1; 512 when stat says 0, as
// procfs does.
func firstSize(st, limit int64) int64 {
	switch {
	case st <= 0:
		return min(512, limit+1)
	case st >= limit:
		return limit + 1
	}
	return st + 1
}

// grow doubles buf's capacity, to at most limit+1 bytes.
func grow(buf []byte, limit int64) []byte {
	n := min(2*int64(cap(buf)), limit+1)
	return append(make([]byte, 0, n), buf...)
}

// size prints a cap as people write it: 1 MiB, 64 KiB, 4096 bytes.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n > 4096 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
