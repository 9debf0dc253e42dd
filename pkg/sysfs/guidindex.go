package sysfs

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RDMAEntry is one entry of class/infiniband: a device's name and the
// inode number of its entry. sysfs gives every new node a new inode number
// (kernfs allocates them cyclically), so a device that went away and came
// back, as an unbind/bind does, has a different number than before.
type RDMAEntry struct {
	Name string
	Ino  uint64
}

// GUIDIndex is the node GUID of every RDMA device on the node, with the
// class/infiniband listing it was read under. ADD checks its VF's GUIDs
// for duplicates against it; reading every device's node_guid (some 70 on
// a DGX node, three system calls each) is most of what ADD costs, so the
// index is kept in the state directory and read again as long as the
// listing is unchanged.
//
// That is sound because a device's node GUID does not change in place:
// the kernel reads it from the adapter when the driver probes the device,
// and a new VF GUID set through the PF (ip link set $pf vf $n node_guid)
// reaches the VF's RDMA device only when the VF is re-probed, which makes
// it a new entry. A caller that finds a duplicate in a reused index still
// confirms it with a fresh scan before acting on it.
type GUIDIndex struct {
	Root    string
	Entries []RDMAEntry     // sorted by name
	GUIDs   map[string]GUID // by the name of an entry; an entry whose node_guid could not be read has none
}

// guidIndexHeader is the first line of an encoded index, with its version.
const guidIndexHeader = "sriov-stable-cni guid-index 1"

// Current reports whether idx was read under r's root and class/infiniband
// still lists exactly its devices, each under the inode number it had. It
// compares while it lists: each entry is looked up in the index, which is
// sorted by name, so nothing is allocated or sorted. No class directory (no
// RDMA stack loaded) matches an index of no devices.
// Equivalent to: ls -i $root/class/infiniband, compared with the index
func (r Reader) Current(idx *GUIDIndex) (bool, error) {
	if idx.Root != r.Root {
		return false, nil
	}
	classDir := filepath.Join(r.Root, "class", "infiniband")
	dir, err := openRetry(unix.AT_FDCWD, classDir, unix.O_DIRECTORY)
	if err == unix.ENOENT {
		return len(idx.Entries) == 0, nil
	}
	if err != nil {
		return false, fmt.Errorf("list RDMA devices: %w", &fs.PathError{Op: "open", Path: classDir, Err: err})
	}
	defer unix.Close(dir)
	var buf [4096]byte
	listed := 0
	for {
		n, err := unix.Getdents(dir, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("list RDMA devices: %w", &fs.PathError{Op: "readdirent", Path: classDir, Err: err})
		}
		if n <= 0 {
			return listed == len(idx.Entries), nil
		}
		for b := buf[:n]; ; {
			var name []byte
			var ino uint64
			var ok bool
			if name, ino, b, ok = nextDirent(b); !ok {
				break
			}
			if ino == 0 || string(name) == "." || string(name) == ".." {
				continue
			}
			i, found := slices.BinarySearchFunc(idx.Entries, name, compareEntryName)
			if !found || idx.Entries[i].Ino != ino {
				return false, nil
			}
			listed++
		}
	}
}

// compareEntryName orders an entry against a name, without converting the
// name to a string that would be allocated.
func compareEntryName(e RDMAEntry, name []byte) int {
	switch {
	case e.Name < string(name):
		return -1
	case e.Name > string(name):
		return 1
	}
	return 0
}

// listClass opens and lists class/infiniband, leaving it open (dir, or -1
// when there is none) for reads relative to it.
func (r Reader) listClass() (entries []RDMAEntry, dir int, err error) {
	classDir := filepath.Join(r.Root, "class", "infiniband")
	dir, err = openRetry(unix.AT_FDCWD, classDir, unix.O_DIRECTORY)
	if err == unix.ENOENT {
		return nil, -1, nil
	}
	if err != nil {
		return nil, -1, fmt.Errorf("list RDMA devices: %w", &fs.PathError{Op: "open", Path: classDir, Err: err})
	}
	entries, err = readDirEntries(dir)
	if err != nil {
		unix.Close(dir)
		return nil, -1, fmt.Errorf("list RDMA devices: %w", &fs.PathError{Op: "readdirent", Path: classDir, Err: err})
	}
	return entries, dir, nil
}

// ScanGUIDs reads every RDMA device's node GUID into a new index. The
// listing is taken first: a device re-probed during the scan leaves the
// index under the old listing, so the next reader scans again.
func (r Reader) ScanGUIDs() (*GUIDIndex, error) {
	entries, dir, err := r.listClass()
	if err != nil {
		return nil, err
	}
	idx := &GUIDIndex{Root: r.Root, Entries: entries, GUIDs: make(map[string]GUID, len(entries))}
	if dir < 0 {
		return idx, nil
	}
	defer unix.Close(dir)
	var buf [64]byte
	for _, e := range entries {
		// Relative to the open class directory: the kernel walks only
		// the device's own symlink, not the root's path, per device.
		raw, err := readAt(dir, e.Name+"/node_guid", buf[:])
		if err != nil {
			continue // a device going away while we list is not ours to judge
		}
		if g, err := ParseGUID(raw); err == nil {
			idx.GUIDs[e.Name] = g
		}
	}
	return idx, nil
}

// Holders lists the devices whose node GUID is g, in the listing's order.
func (idx *GUIDIndex) Holders(g GUID) []string {
	var out []string
	for _, e := range idx.Entries {
		if h, ok := idx.GUIDs[e.Name]; ok && h == g {
			out = append(out, e.Name)
		}
	}
	return out
}

// DevicePCI is the PCI function an RDMA device belongs to, or the device's
// own name when its device link cannot be read.
// Equivalent to: basename $(readlink $root/class/infiniband/$name/device)
func (r Reader) DevicePCI(name string) string {
	pci, err := readlinkBase(unix.AT_FDCWD, filepath.Join(r.Root, "class", "infiniband", name, "device"))
	if err != nil {
		return name
	}
	return pci
}

// MarshalText encodes the index as lines of text: a header, the root, then
// "name inode guid" per device ("-" for a GUID that could not be read).
func (idx *GUIDIndex) MarshalText() ([]byte, error) {
	if strings.ContainsAny(idx.Root, "\n") {
		return nil, fmt.Errorf("encode GUID index: root %q holds a newline", idx.Root)
	}
	var b strings.Builder
	b.Grow(64 + 48*len(idx.Entries))
	fmt.Fprintf(&b, "%s\nroot %s\n", guidIndexHeader, idx.Root)
	for _, e := range idx.Entries {
		if strings.ContainsAny(e.Name, " \n") {
			return nil, fmt.Errorf("encode GUID index: device name %q holds a space or newline", e.Name)
		}
		g, ok := idx.GUIDs[e.Name]
		s := "-"
		if ok {
			s = g.String()
		}
		fmt.Fprintf(&b, "%s %d %s\n", e.Name, e.Ino, s)
	}
	return []byte(b.String()), nil
}

// UnmarshalText decodes what MarshalText wrote; anything else, including
// another version's header, is an error.
func (idx *GUIDIndex) UnmarshalText(data []byte) error {
	// Cut by cut: device names are substrings of one copy of data, and
	// nothing is allocated per line, since ADD decodes the index each time.
	body, ok := strings.CutSuffix(string(data), "\n")
	if !ok {
		return fmt.Errorf("decode GUID index: no final newline (a torn write?)")
	}
	header, rest, _ := strings.Cut(body, "\n")
	if header != guidIndexHeader {
		return fmt.Errorf("decode GUID index: not a %q file", guidIndexHeader)
	}
	rootLine, rest, more := strings.Cut(rest, "\n")
	root, ok := strings.CutPrefix(rootLine, "root ")
	if !ok {
		return fmt.Errorf("decode GUID index: line 2 is not a root line")
	}
	n := 0
	if more {
		n = strings.Count(rest, "\n") + 1
	}
	out := GUIDIndex{Root: root, Entries: make([]RDMAEntry, 0, n), GUIDs: make(map[string]GUID, n)}
	for line := 3; more; line++ {
		var text string
		text, rest, more = strings.Cut(rest, "\n")
		name, inoText, ok1 := strings.Cut(text, " ")
		inoText, guidText, ok2 := strings.Cut(inoText, " ")
		if !ok1 || !ok2 || name == "" || strings.Contains(guidText, " ") {
			return fmt.Errorf("decode GUID index: line %d: want \"name inode guid\", got %q", line, text)
		}
		ino, err := strconv.ParseUint(inoText, 10, 64)
		if err != nil {
			return fmt.Errorf("decode GUID index: line %d: inode: %w", line, err)
		}
		if k := len(out.Entries); k > 0 && out.Entries[k-1].Name >= name {
			return fmt.Errorf("decode GUID index: line %d: %s is out of order", line, name)
		}
		out.Entries = append(out.Entries, RDMAEntry{Name: name, Ino: ino})
		if guidText == "-" {
			continue
		}
		g, err := ParseGUID(guidText)
		if err != nil {
			return fmt.Errorf("decode GUID index: line %d: %w", line, err)
		}
		out.GUIDs[name] = g
	}
	*idx = out
	return nil
}

// readDirEntries lists an open directory's entries with their inode
// numbers, "." and ".." left out, sorted by name, with getdents directly.
func readDirEntries(dir int) ([]RDMAEntry, error) {
	var out []RDMAEntry
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(dir, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			slices.SortFunc(out, func(a, b RDMAEntry) int { return strings.Compare(a.Name, b.Name) })
			return out, nil
		}
		out = appendDirents(out, buf[:n])
	}
}

// appendDirents decodes the linux_dirent64 records of buf.
func appendDirents(out []RDMAEntry, buf []byte) []RDMAEntry {
	for {
		name, ino, rest, ok := nextDirent(buf)
		if !ok {
			return out
		}
		buf = rest
		if s := string(name); s != "." && s != ".." && ino != 0 {
			out = append(out, RDMAEntry{Name: s, Ino: ino})
		}
	}
}

// nextDirent decodes the first linux_dirent64 record of buf: inode (8
// bytes), offset (8), record length (2), type (1), then the NUL-terminated
// name. ok is false when buf holds no whole record.
func nextDirent(buf []byte) (name []byte, ino uint64, rest []byte, ok bool) {
	const nameOff = 19
	if len(buf) < nameOff {
		return nil, 0, nil, false
	}
	reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
	if reclen < nameOff || reclen > len(buf) {
		return nil, 0, nil, false
	}
	name = buf[nameOff:reclen]
	if i := slices.Index(name, 0); i >= 0 {
		name = name[:i]
	}
	return name, binary.NativeEndian.Uint64(buf[0:8]), buf[reclen:], true
}
