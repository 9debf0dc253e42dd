package sysfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// The kernel announces no change of an RDMA port's state or link layer
// (no netlink event, no uevent), so a watcher re-reads those attributes.
// It keeps them open and reads each from offset 0: one pread per file, no
// path walk, which is cheap enough to do every second on every port of a
// node (some 70 devices on a DGX node).

// OpenPolled opens the attributes of the RDMA device at dir (an entry of
// <pci>/infiniband/ or class/infiniband/) that a watcher re-reads:
// node_guid, and ports/*/state and ports/*/link_layer. Each is opened as
// package safefile opens a file: non-blocking, not through a link, and
// only if it is a regular file; one that is not (a FIFO in a fixture,
// where a read would never return) is left out, and a check that reads it
// through ReadAttr reports it.
func OpenPolled(dir string) []*os.File {
	var files []*os.File
	if f, err := safefile.Open(filepath.Join(dir, "node_guid")); err == nil {
		files = append(files, f)
	}
	ports, _ := os.ReadDir(filepath.Join(dir, "ports"))
	for _, port := range ports {
		for _, attr := range []string{"state", "link_layer"} {
			if f, err := safefile.Open(filepath.Join(dir, "ports", port.Name(), attr)); err == nil {
				files = append(files, f)
			}
		}
	}
	return files
}

// ReadPolled reads each file from offset 0 into one value (each file's
// bytes, then a NUL), or "unreadable" and false when one fails. buf holds
// one file's value (an attribute is a few bytes; 64 is plenty).
func ReadPolled(files []*os.File, buf []byte) ([]byte, bool) {
	now := []byte{}
	for _, f := range files {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) || n == 0 {
			return append(now, "unreadable"...), false
		}
		now = append(append(now, buf[:n]...), 0)
	}
	return now, true
}

// ListRDMA lists class/infiniband, each entry with its inode number (a
// device that went and came back has a new one), sorted by name; none
// when there is no such directory.
// Equivalent to: ls -i $root/class/infiniband
func (r Reader) ListRDMA() ([]RDMAEntry, error) { return r.listClass() }

// RDMAPath is the path of an RDMA device's class/infiniband entry.
func (r Reader) RDMAPath(name string) string { return filepath.Join(r.classDir(), name) }
