// Package state keeps one versioned JSON record per attachment under the
// plugin's state directory, written atomically, and the per-VF file locks
// that serialize operations on one VF across concurrent plugin runs.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/crashpoint"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// RecordVersion is the schema version written into new records.
const RecordVersion = 1

// MaxFileSize caps the read of a record and of the GUID index. A record is
// under 2 KiB and a DGX node's index about 4 KiB; anything near the cap is
// not ours, and is reported as unreadable instead of read into memory.
const MaxFileSize = 1 << 20

// ErrNotFound reports a missing record.
var ErrNotFound = errors.New("no attachment record")

// Record is what ADD learned about one attachment, enough for CHECK, DEL,
// GC and the drift monitor to find and judge the VF again.
type Record struct {
	Version     int    `json:"version"`
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	// The pod, from CNI_ARGS (K8S_POD_*) as Multus and the CRI runtimes
	// pass them; empty in records of earlier releases and of runtimes that
	// pass none.
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	PCI          string `json:"pci"`
	PF           string `json:"pf,omitempty"`
	VFIndex      int    `json:"vfIndex"`
	AltName      string `json:"altName"`
	// AddedAltName is true when ADD added the altname (DEL then removes it,
	// returning the device as it came).
	AddedAltName bool     `json:"addedAltName,omitempty"`
	FoundAs      string   `json:"foundAs,omitempty"` // the name the VF had when ADD found it
	MAC          string   `json:"mac"`
	MTU          int      `json:"mtu"`
	LinkLayer    string   `json:"linkLayer"` // "infiniband" or "ethernet"
	NodeGUID     string   `json:"nodeGUID,omitempty"`
	RDMA         []string `json:"rdma,omitempty"`
	// RDMASource is where ADD found the RDMA devices (rdma.Source:
	// host-sysfs, netns-netlink, netns-sysfs); empty without any and in
	// records of earlier releases.
	RDMASource string    `json:"rdmaSource,omitempty"`
	PortPolicy string    `json:"portPolicy"`
	GUIDPolicy string    `json:"guidPolicy"`
	SysfsRoot  string    `json:"sysfsRoot"`
	Created    time.Time `json:"created"`
}

// Key is the identity of an attachment: network, container and ifname.
type Key struct {
	Network, ContainerID, IfName string
}

func (k Key) String() string { return k.Network + "/" + k.ContainerID + "/" + k.IfName }

// Key returns the record's identity.
func (r *Record) Key() Key { return Key{r.Network, r.ContainerID, r.IfName} }

// Store is a state directory.
type Store struct {
	dir string
}

// NewStore returns a store over dir; nothing is created until first use.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) recordDir() string { return filepath.Join(s.dir, "attachments") }
func (s *Store) lockDir() string   { return filepath.Join(s.dir, "locks") }

// fileName turns a key into a file name that cannot leave the records
// directory: every byte outside [A-Za-z0-9.-] is %-escaped ('_' separates
// the parts), and over-long names are replaced by their SHA-256.
func fileName(k Key) string {
	name := escape(k.Network) + "_" + escape(k.ContainerID) + "_" + escape(k.IfName)
	if len(name) > 200 {
		// The escaped name is one-to-one with the key, so its hash is too.
		sum := sha256.Sum256([]byte(name))
		name = "h-" + hex.EncodeToString(sum[:])
	}
	return name + ".json"
}

func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Path is the record file of a key.
func (s *Store) Path(k Key) string { return filepath.Join(s.recordDir(), fileName(k)) }

// Save writes the record atomically (see writeAtomic), mode 0600.
func (s *Store) Save(r *Record) error {
	r.Version = RecordVersion
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", r.Key(), err)
	}
	err = writeAtomic(s.Path(r.Key()), data)
	if errors.Is(err, fs.ErrNotExist) { // the first record of this state dir
		if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		err = writeAtomic(s.Path(r.Key()), data)
	}
	return err
}

// staleTempAge is how old a temp or probe file must be before List removes
// it. A plugin killed between creating and renaming one leaves it behind;
// no live write takes this long.
const staleTempAge = 10 * time.Minute

// removeStaleTemps deletes the temp and probe files that killed writers
// left in dir, so crashes do not pile up files in the state directory.
func removeStaleTemps(dir string, entries []fs.DirEntry) {
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".tmp-") && !strings.HasPrefix(e.Name(), ".probe-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > staleTempAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// writeAtomic replaces path with data: a temp file in the same directory,
// written and fsynced, renamed over path, and the directory fsynced, so a
// reader (a concurrent CHECK, the monitor) sees the old file or the new
// one whole, and so does the next boot if the state dir is on a disk. On
// the default state dir, a tmpfs, the fsyncs cost nothing.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	crashpoint.Hit(crashpoint.TempWritten)
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Load reads the record of a key; ErrNotFound when there is none.
func (s *Store) Load(k Key) (*Record, error) {
	return readRecord(s.Path(k))
}

// readRecord reads and decodes the record file at path. Only a regular
// file up to MaxFileSize is read, without following a link and without
// waiting on a FIFO (package safefile): a file someone put in the state
// directory must not stall or flood a verb, the monitor or the doctor.
func readRecord(path string) (*Record, error) {
	data, err := safefile.ReadFile(path, MaxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	r := &Record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("decode record %s: %w", path, err)
	}
	if r.Version < 1 || r.Version > RecordVersion {
		return nil, fmt.Errorf("record %s has version %d, this plugin reads 1..%d", path, r.Version, RecordVersion)
	}
	return r, nil
}

// Delete removes a key's record; a missing record is not an error.
func (s *Store) Delete(k Key) error {
	err := os.Remove(s.Path(k))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove record %s: %w", k, err)
	}
	return nil
}

// isRecordFile tells record files from the temp and probe files beside
// them. A record's name may start with a dot (a network named so).
func isRecordFile(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".tmp-") && !strings.HasPrefix(name, ".probe-")
}

// List reads every record, sorted by key. Unreadable files are returned as
// errors after the good records, so one bad file does not hide the rest.
// It also removes stale temp files (see staleTempAge): GC, the monitor's
// sweeps and the ownership scan list the directory anyway, ADD need not.
func (s *Store) List() ([]*Record, error) {
	entries, err := os.ReadDir(s.recordDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var recs []*Record
	var errs []error
	removeStaleTemps(s.recordDir(), entries)
	for _, e := range entries {
		if !isRecordFile(e.Name()) {
			continue
		}
		r, err := readRecord(filepath.Join(s.recordDir(), e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Key().String() < recs[j].Key().String() })
	return recs, errors.Join(errs...)
}

// RemoveUnreadableBefore removes the record files that cannot be read (empty
// or torn, as records written before Save fsynced them could be after a
// power loss, or written by a newer plugin) and were last written before t,
// and returns their names.
// GC passes the boot time: no attachment from before it can be live, and
// an unreadable record is otherwise never removed, since its key is unknown.
func (s *Store) RemoveUnreadableBefore(t time.Time) ([]string, error) {
	entries, err := os.ReadDir(s.recordDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !isRecordFile(e.Name()) {
			continue
		}
		path := filepath.Join(s.recordDir(), e.Name())
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !info.ModTime().Before(t) {
			continue
		}
		if _, err := readRecord(path); err == nil || errors.Is(err, ErrNotFound) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove unreadable record: %w", err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// VFLock is a held lock on one VF. Its lock file also indexes the VF's
// owner: the file name of the record that claims the VF, so ADD and DEL
// read one record instead of all of them (a DGX node with every VF in use
// has 64).
//
// The index is written only under the lock: ADD sets it before saving the
// record, DEL frees it after removing the record. So an owner whose record
// is missing (a plugin killed between the two, or GC) is no owner, and
// every record of the VF is named by the index. A lock file with no index
// line (made before the index existed, or torn by a kill) makes Claims
// read every record, as before.
type VFLock struct {
	f   *os.File
	s   *Store
	pci string
}

// LockVF takes an exclusive lock for one VF (by its normalized PCI address).
// The lock is an flock on locks/<pci>.lock, so it dies with the process
// that held it; Unlock releases it. The lock file is written (its index),
// so it is opened without following a link and must be a regular file: a
// link there would have root write into whatever it points at.
func (s *Store) LockVF(pci string) (*VFLock, error) {
	if strings.ContainsAny(pci, "/\x00") || pci == "" || strings.HasPrefix(pci, ".") {
		return nil, fmt.Errorf("lock VF %q: not a PCI address", pci)
	}
	f, err := s.flock(pci + ".lock")
	if err != nil {
		return nil, err
	}
	return &VFLock{f: f, s: s, pci: pci}, nil
}

// GUIDLock is a held lock on one node GUID. In RDMA netns exclusive mode
// ADD holds it from its look into the GUID directory (OwnersOf) until its
// own entry there and its record are written, so two ADDs of VFs that
// carry one GUID cannot both find no other owner and both pass. It is
// taken only while the VF's lock is held, never the other way round, and
// a VF's several GUIDs in sorted order, so no two ADDs wait on each other.
type GUIDLock struct{ f *os.File }

// LockGUID takes the exclusive lock of a node GUID (sysfs form), an flock
// on locks/guid-<guid>.lock that dies with its process.
func (s *Store) LockGUID(guid string) (*GUIDLock, error) {
	if !validGUIDName(guid) {
		return nil, fmt.Errorf("lock GUID %q: not a GUID", guid)
	}
	f, err := s.flock("guid-" + guid + ".lock")
	if err != nil {
		return nil, err
	}
	return &GUIDLock{f: f}, nil
}

// Unlock releases the lock.
func (l *GUIDLock) Unlock() { l.f.Close() }

// flock opens locks/<name> (a regular file, not followed if a link) and
// takes an exclusive flock on it, waiting for it.
func (s *Store) flock(name string) (*os.File, error) {
	path := filepath.Join(s.lockDir(), name)
	f, err := safefile.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(s.lockDir(), 0o700); err != nil {
			return nil, fmt.Errorf("create lock directory: %w", err)
		}
		f, err = safefile.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// OpenLog opens a log file for appending, creating it with mode 0600. A
// symlink at path is an error (O_NOFOLLOW): a link planted under an
// allowed log root cannot make root append to a file outside it.
func OpenLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
}

// Unlock releases the lock.
func (l *VFLock) Unlock() { l.f.Close() }

// The index is one line, padded with spaces to indexSize bytes so that
// every write has the same length: a pwrite, no truncate.
const (
	indexSize  = 256
	indexOwner = "owner "
	indexFree  = "free"
)

// readIndex returns the lock file's index line without its padding.
func (l *VFLock) readIndex() (string, error) {
	buf := make([]byte, indexSize+1)
	n, err := l.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read lock file %s: %w", l.f.Name(), err)
	}
	if n != indexSize || buf[indexSize-1] != '\n' {
		return "", nil // none (an older lock file), or torn
	}
	return strings.TrimRight(string(buf[:indexSize-1]), " "), nil
}

// Claims returns the records that claim the VF, other than self's: the
// indexed owner's record, or with no usable index every record of the VF.
func (l *VFLock) Claims(pci string, self Key) ([]*Record, error) {
	line, err := l.readIndex()
	if err != nil {
		return nil, err
	}
	if line == indexFree {
		return nil, nil
	}
	if name, _, ok := parseOwner(line); ok {
		r, err := readRecord(filepath.Join(l.s.recordDir(), name))
		switch {
		case errors.Is(err, ErrNotFound):
			return nil, nil
		case err == nil && r.PCI == pci:
			if r.Key() == self {
				return nil, nil
			}
			return []*Record{r}, nil
		}
		// An unreadable owner, or one of another VF: the index is not to
		// be trusted, so read everything.
	}
	return l.s.Claims(pci, self)
}

// parseOwner reads an owner index line: "owner <record file>", with
// " guid <node GUID>" after it when ADD recorded one.
func parseOwner(line string) (file, guid string, ok bool) {
	f := strings.Split(line, " ")
	switch {
	case len(f) == 2 && f[0] == "owner":
	case len(f) == 4 && f[0] == "owner" && f[2] == "guid" && f[3] != "":
		guid = f[3]
	default:
		return "", "", false
	}
	if !strings.HasSuffix(f[1], ".json") || strings.Contains(f[1], "/") {
		return "", "", false
	}
	return f[1], guid, true
}

// Claims reads every record and returns those of the VF pci other than
// self's.
func (s *Store) Claims(pci string, self Key) ([]*Record, error) {
	recs, err := s.List()
	var claims []*Record
	for _, r := range recs {
		if r.PCI == pci && r.Key() != self {
			claims = append(claims, r)
		}
	}
	return claims, err
}

// SetOwner indexes k's record as the VF's owner. ADD calls it before
// saving the record, with the VF's node GUID when it has one ("" for
// none), which Free needs to remove the VF's entry of the GUID directory.
func (l *VFLock) SetOwner(k Key, guid string) error {
	line := indexOwner + fileName(k)
	if guid != "" {
		if !validGUIDName(guid) {
			return fmt.Errorf("index VF owner: %q is not a GUID", guid)
		}
		line += " guid " + guid
	}
	return l.writeIndex(line)
}

// Free clears the index if it names k, and removes the VF's entry from the
// GUID directory. DEL calls it after removing k's record. An index naming
// another key is that key's claim; no index (a lock file from before it,
// where records of the VF may still exist) stays none, so claims keep
// reading every record.
func (l *VFLock) Free(k Key) error {
	line, err := l.readIndex()
	if err != nil {
		return err
	}
	name, guid, ok := parseOwner(line)
	if !ok || name != fileName(k) {
		return nil
	}
	if err := l.writeIndex(indexFree); err != nil {
		return err
	}
	if guid != "" {
		if err := os.Remove(filepath.Join(l.s.guidDir(), guid+"_"+l.pci)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the GUID entry of VF %s: %w", l.pci, err)
		}
	}
	return nil
}

// The GUID directory, guids/, holds an entry per attached VF with a node
// GUID, named <guid>_<pci>: a symlink whose target is the owner's record
// file. In RDMA netns exclusive mode an attached VF's device lives in its
// pod's netns, where the host's GUID index cannot see it; ADD finds the
// attached VFs holding a GUID with one directory listing (OwnersOf) instead
// of reading every VF's lock or record. Each entry is written under its
// VF's lock, so no lock covers the directory.

func (s *Store) guidDir() string { return filepath.Join(s.dir, "guids") }

// validGUIDName accepts the sysfs form of a GUID: xxxx:xxxx:xxxx:xxxx.
func validGUIDName(g string) bool {
	if len(g) != 19 {
		return false
	}
	for i, c := range g {
		if i%5 == 4 {
			if c != ':' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IndexGUID enters the VF in the GUID directory under guid, owned by k's
// record, replacing any entry it had under another GUID. Call it after
// SetOwner(k, guid).
// Equivalent to: ln -sfn <record> guids/<guid>_<pci>
func (l *VFLock) IndexGUID(k Key, guid string) error {
	if !validGUIDName(guid) {
		return fmt.Errorf("index VF %s by GUID: %q is not a GUID", l.pci, guid)
	}
	dir := l.s.guidDir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("GUID directory: %w", err)
	}
	name := guid + "_" + l.pci
	for _, e := range entries {
		if other, ok := strings.CutSuffix(e.Name(), "_"+l.pci); ok && e.Name() != name && validGUIDName(other) {
			_ = os.Remove(filepath.Join(dir, e.Name())) // left by an owner no DEL freed
		}
	}
	tmp := filepath.Join(dir, ".tmp-"+l.pci)
	_ = os.Remove(tmp)
	if err := os.Symlink(fileName(k), tmp); err != nil {
		return fmt.Errorf("index VF %s by GUID: %w", l.pci, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("index VF %s by GUID: %w", l.pci, err)
	}
	return nil
}

// OwnerGUID is an entry of the GUID directory: a VF, the GUID its owner's
// ADD found, and that owner's record.
type OwnerGUID struct {
	PCI, GUID string
	record    string // the owner's record file
}

// OwnersOf lists the VFs the GUID directory enters under guid, read
// without any lock: an entry may be stale (its owner killed before DEL
// freed it), so the caller confirms a match with Owner before acting on it.
// Equivalent to: ls -l guids/$guid_*
func (s *Store) OwnersOf(guid string) ([]OwnerGUID, error) {
	entries, err := os.ReadDir(s.guidDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the GUID directory: %w", err)
	}
	var out []OwnerGUID
	for _, e := range entries {
		pci, ok := strings.CutPrefix(e.Name(), guid+"_")
		if !ok || pci == "" || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(s.guidDir(), e.Name()))
		if err != nil || strings.Contains(target, "/") || !strings.HasSuffix(target, ".json") {
			continue
		}
		out = append(out, OwnerGUID{PCI: pci, GUID: guid, record: target})
	}
	return out, nil
}

// Owner reads the record an entry of the GUID directory names.
func (s *Store) Owner(o OwnerGUID) (*Record, error) {
	return readRecord(filepath.Join(s.recordDir(), o.record))
}

// writeIndex writes line padded to indexSize. Lines are short: a record's
// file name is at most 205 bytes (see fileName).
func (l *VFLock) writeIndex(line string) error {
	buf := []byte(line + strings.Repeat(" ", indexSize-1-len(line)) + "\n")
	if _, err := l.f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("index VF owner in %s: %w", l.f.Name(), err)
	}
	return nil
}

// Writable checks that records can be written: the directory exists or can
// be made, and a temp file can be created and removed in it.
func (s *Store) Writable() error {
	if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
		return fmt.Errorf("state directory %s: %w", s.dir, err)
	}
	f, err := os.CreateTemp(s.recordDir(), ".probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", s.dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// guidIndexFile holds the node's RDMA GUID index (sysfs.GUIDIndex), a
// cache of host facts kept beside the records.
const guidIndexFile = "guid-index"

// LoadGUIDIndex reads the saved GUID index; an error wrapping
// fs.ErrNotExist when there is none. Like a record, it is read only as a
// regular file up to MaxFileSize (ADD then scans, and saves a new one).
func (s *Store) LoadGUIDIndex() ([]byte, error) {
	data, err := safefile.ReadFile(filepath.Join(s.dir, guidIndexFile), MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read the GUID index: %w", err)
	}
	return data, nil
}

// SaveGUIDIndex replaces the saved GUID index atomically, as Save does a
// record: concurrent ADDs may each write one, and a reader sees one whole.
// It runs only when the node's RDMA devices changed, so it also sweeps the
// temp files a killed writer left beside the index.
func (s *Store) SaveGUIDIndex(data []byte) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if entries, err := os.ReadDir(s.dir); err == nil {
		removeStaleTemps(s.dir, entries)
	}
	return writeAtomic(filepath.Join(s.dir, guidIndexFile), data)
}
