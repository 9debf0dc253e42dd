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
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RecordVersion is the schema version written into new records.
const RecordVersion = 1

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
	PCI         string `json:"pci"`
	PF          string `json:"pf,omitempty"`
	VFIndex     int    `json:"vfIndex"`
	AltName     string `json:"altName"`
	// AddedAltName is true when ADD added the altname (DEL then removes it,
	// returning the device as it came).
	AddedAltName bool      `json:"addedAltName,omitempty"`
	FoundAs      string    `json:"foundAs,omitempty"` // the name the VF had when ADD found it
	MAC          string    `json:"mac"`
	MTU          int       `json:"mtu"`
	LinkLayer    string    `json:"linkLayer"` // "infiniband" or "ethernet"
	NodeGUID     string    `json:"nodeGUID,omitempty"`
	RDMA         []string  `json:"rdma,omitempty"`
	PortPolicy   string    `json:"portPolicy"`
	GUIDPolicy   string    `json:"guidPolicy"`
	SysfsRoot    string    `json:"sysfsRoot"`
	Created      time.Time `json:"created"`
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

// Save writes the record atomically: temp file in the same directory,
// fsync, rename, fsync of the directory. Mode 0600.
func (s *Store) Save(r *Record) error {
	r.Version = RecordVersion
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record %s: %w", r.Key(), err)
	}
	if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if err := writeAtomic(s.Path(r.Key()), data); err != nil {
		return err
	}
	removeStaleTemps(s.recordDir())
	return nil
}

// staleTempAge is how old a temp or probe file must be before Save removes
// it. A plugin killed between creating and renaming one leaves it behind;
// no live write takes this long.
const staleTempAge = 10 * time.Minute

// removeStaleTemps deletes the temp and probe files that killed writers
// left in dir, so crashes do not pile up files in the state directory.
func removeStaleTemps(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".tmp-") && !strings.HasPrefix(e.Name(), ".probe-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > staleTempAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-*") // mode 0600
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
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load reads the record of a key; ErrNotFound when there is none.
func (s *Store) Load(k Key) (*Record, error) {
	return readRecord(s.Path(k))
}

func readRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", path, err)
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

// List reads every record, sorted by key. Unreadable files are returned as
// errors after the good records, so one bad file does not hide the rest.
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
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".tmp-") || strings.HasPrefix(e.Name(), ".probe-") {
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

// LockVF takes an exclusive lock for one VF (by its normalized PCI address)
// and returns its release. The lock is an flock on locks/<pci>.lock, so it
// dies with the process that held it.
func (s *Store) LockVF(pci string) (func(), error) {
	if strings.ContainsAny(pci, "/\x00") || pci == "" || strings.HasPrefix(pci, ".") {
		return nil, fmt.Errorf("lock VF %q: not a PCI address", pci)
	}
	if err := os.MkdirAll(s.lockDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	path := filepath.Join(s.lockDir(), pci+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
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
	return func() { f.Close() }, nil
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
