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
// node_guid, and ports/*/state and ports/*/link_layer (not phys_state: the
// kernel moves it before state on the way up and with it on the way down,
// so a change of state is the one to watch, and on mlx5 each read is a
// firmware query). Each is opened as
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

// ReadPolled appends to now each file's value read from offset 0, then a
// NUL; a file that cannot be read (carrier, while its netdev is down)
// appends "-" and a NUL, the others are still read, and ok is false. buf
// holds one file's value (an attribute is a few bytes; 64 is plenty). The
// result is never nil: a caller tells "read, nothing to read" from "never
// read".
func ReadPolled(now []byte, files []*os.File, buf []byte) (_ []byte, ok bool) {
	ok = true
	if now == nil {
		now = []byte{}
	}
	for _, f := range files {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) || n == 0 {
			now, ok = append(now, '-', 0), false
			continue
		}
		now = append(append(now, buf[:n]...), 0)
	}
	return now, ok
}

// ListRDMA lists class/infiniband, each entry with its inode number (a
// device that went and came back has a new one), sorted by name; none
// when there is no such directory.
// Equivalent to: ls -i $root/class/infiniband
func (r Reader) ListRDMA() ([]RDMAEntry, error) { return r.listClass() }

// RDMAPath is the path of an RDMA device's class/infiniband entry.
func (r Reader) RDMAPath(name string) string { return filepath.Join(r.classDir(), name) }

// OpenNetdevs opens flags and carrier of each netdev named of PCI
// function addr (as Netdevs lists them), as OpenPolled opens a port's
// attributes. The kernel announces a change of either only over netlink,
// to sockets in the netns the netdev is in, which a watcher in a pod's
// netns never hears; sysfs shows the netns it was mounted in, the host's.
func (r Reader) OpenNetdevs(addr string, names []string) []*os.File {
	var files []*os.File
	for _, name := range names {
		for _, attr := range []string{"flags", "carrier"} {
			if f, err := safefile.Open(r.pciPath(addr, "net", name, attr)); err == nil {
				files = append(files, f)
			}
		}
	}
	return files
}
