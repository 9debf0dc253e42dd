package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
// for duplicates against it. Reading every device's node_guid (some 70 on
// a DGX node) on every ADD would be work done again for nothing, so the
// index is kept in the state directory and reused as long as the listing
// is unchanged.
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
// still lists exactly its devices, each under the inode number it had. No
// class directory (no RDMA stack loaded) matches an index of no devices.
// Equivalent to: ls -i $root/class/infiniband, compared with the index
func (r Reader) Current(idx *GUIDIndex) (bool, error) {
	if idx.Root != r.Root {
		return false, nil
	}
	entries, err := r.listClass()
	if err != nil {
		return false, err
	}
	return slices.Equal(entries, idx.Entries), nil
}

// listClass lists class/infiniband with each entry's inode number, sorted
// by name; none when there is no such directory. An entry that goes away
// while it is listed is left out.
func (r Reader) listClass() ([]RDMAEntry, error) {
	classDir := r.classDir()
	dir, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	var entries []RDMAEntry
	for _, e := range dir {
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list RDMA devices: %w", err)
		}
		entries = append(entries, RDMAEntry{Name: e.Name(), Ino: info.Sys().(*syscall.Stat_t).Ino})
	}
	return entries, nil
}

func (r Reader) classDir() string { return filepath.Join(r.Root, "class", "infiniband") }

// ScanGUIDs reads every RDMA device's node GUID into a new index. The
// listing is taken first: a device re-probed during the scan leaves the
// index under the old listing, so the next reader scans again.
func (r Reader) ScanGUIDs() (*GUIDIndex, error) {
	entries, err := r.listClass()
	if err != nil {
		return nil, err
	}
	idx := &GUIDIndex{Root: r.Root, Entries: entries, GUIDs: make(map[string]GUID, len(entries))}
	for _, e := range entries {
		raw, err := ReadAttr(filepath.Join(r.classDir(), e.Name, "node_guid"))
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
	pci, err := readlinkBase(filepath.Join(r.classDir(), name, "device"))
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
	body, ok := strings.CutSuffix(string(data), "\n")
	if !ok {
		return fmt.Errorf("decode GUID index: no final newline (a torn write?)")
	}
	lines := strings.Split(body, "\n")
	if lines[0] != guidIndexHeader {
		return fmt.Errorf("decode GUID index: not a %q file", guidIndexHeader)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "root ") {
		return fmt.Errorf("decode GUID index: line 2 is not a root line")
	}
	out := GUIDIndex{Root: strings.TrimPrefix(lines[1], "root "), GUIDs: map[string]GUID{}}
	for i, text := range lines[2:] {
		line := i + 3
		fields := strings.Split(text, " ")
		if len(fields) != 3 || fields[0] == "" {
			return fmt.Errorf("decode GUID index: line %d: want \"name inode guid\", got %q", line, text)
		}
		name, inoText, guidText := fields[0], fields[1], fields[2]
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
