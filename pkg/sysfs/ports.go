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

// maxPolledNetdevs bounds the netdevs a watcher keeps open per function: a
// PCI function has one or two; a tree with more is not the kernel's.
const maxPolledNetdevs = 8

// PolledNetdevs lists the netdevs under the PCI function at dir (<dir>/net)
// that a watcher reads the link state of, sorted, at most a few; none when
// there is no such directory.
// Equivalent to: ls $dir/net
func PolledNetdevs(dir string) []string {
	entries, _ := os.ReadDir(filepath.Join(dir, "net"))
	names := make([]string, 0, min(len(entries), maxPolledNetdevs))
	for _, e := range entries[:min(len(entries), maxPolledNetdevs)] {
		names = append(names, e.Name())
	}
	return names
}

// OpenPolledNetdevs opens flags and carrier of each netdev named under the
// PCI function at dir, as OpenPolled opens a port's attributes. The kernel
// announces a change of either only over netlink, to sockets in the netns
// the netdev is in, which a watcher in a pod's netns never hears; sysfs
// shows the netns it was mounted in, the host's.
func OpenPolledNetdevs(dir string, names []string) []*os.File {
	var files []*os.File
	for _, name := range names {
		for _, attr := range []string{"flags", "carrier"} {
			if f, err := safefile.Open(filepath.Join(dir, "net", name, attr)); err == nil {
				files = append(files, f)
			}
		}
	}
	return files
}

// ReadPolledEach is ReadPolled for files of which some may refuse a read
// while others do not (carrier, while its netdev is down): each file's
// bytes then a NUL, or "-" and a NUL for one that cannot be read.
func ReadPolledEach(now []byte, files []*os.File, buf []byte) []byte {
	for _, f := range files {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) || n == 0 {
			now = append(now, '-', 0)
			continue
		}
		now = append(append(now, buf[:n]...), 0)
	}
	return now
}
