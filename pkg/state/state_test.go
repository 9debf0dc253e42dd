package state

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func sampleRecord(network, containerID, ifName string) *Record {
	return &Record{
		Network: network, ContainerID: containerID, IfName: ifName,
		Netns: "/var/run/netns/cni-1234", PCI: "0000:18:00.2", PF: "0000:18:00.0", VFIndex: 0,
		AltName: "vf-0000-18-00.2", AddedAltName: true, FoundAs: "ibp24s0f0v0",
		MAC: "00:00:10:49:fe:80:00:00:00:00:00:00:a2:88:c2:ff:fe:18:00:00", MTU: 4092, LinkLayer: "infiniband",
		NodeGUID: "a288:c2ff:fe18:0000", RDMA: []string{"mlx5_10"}, PortPolicy: "require", GUIDPolicy: "require",
		SysfsRoot: "/sys", Created: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	}
}

func TestSaveLoadDelete(t *testing.T) {
	s := NewStore(t.TempDir())
	rec := sampleRecord("ib-net", "c0ffee", "net1")
	if err := s.Save(rec); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if rec.Version != RecordVersion {
		t.Errorf("Save left Version %d, want %d", rec.Version, RecordVersion)
	}
	got, err := s.Load(rec.Key())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("Load after Save (-want +got):\n%s", diff)
	}

	fi, err := os.Stat(s.Path(rec.Key()))
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("record mode %o, want 600", mode)
	}
	assertOnlyRecords(t, s, 1)

	// Overwrite keeps one file and the new content.
	rec.MTU = 2044
	if err := s.Save(rec); err != nil {
		t.Fatalf("Save again: %v", err)
	}
	if got, err := s.Load(rec.Key()); err != nil || got.MTU != 2044 {
		t.Errorf("Load after overwrite: MTU %v, %v; want 2044", got, err)
	}
	assertOnlyRecords(t, s, 1)

	if err := s.Delete(rec.Key()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Load(rec.Key()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(rec.Key()); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
	assertOnlyRecords(t, s, 0)
}

func TestDeleteAndLoadInEmptyStore(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "never-created"))
	k := Key{"n", "c", "i"}
	if err := s.Delete(k); err != nil {
		t.Errorf("Delete in a store that was never written: %v", err)
	}
	if _, err := s.Load(k); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load: %v, want ErrNotFound", err)
	}
	if recs, err := s.List(); err != nil || len(recs) != 0 {
		t.Errorf("List = %v, %v; want empty, nil", recs, err)
	}
}

// recordDirNames lists the records directory, sorted.
func recordDirNames(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(s.recordDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// assertOnlyRecords checks the records directory holds n .json files and
// nothing else (no temp files).
func assertOnlyRecords(t *testing.T, s *Store, n int) {
	t.Helper()
	names := recordDirNames(t, s)
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			t.Errorf("stray file %q in the records directory", name)
		}
	}
	if len(names) != n {
		t.Errorf("records directory holds %v, want %d record(s)", names, n)
	}
}

// awkwardParts are key parts that must neither escape the records
// directory nor collide with each other.
var awkwardParts = []string{
	"a", "b", "net1", "", ".", "..", "...", "../..", "../../etc/passwd", "/", "/etc", "a/b", "a\\b",
	"a_b", "a__b", "_", "__", "a%b", "%2F", "%5F", "%", "a\x00b", "\x00", "\x00\x00", "a b", "a\nb",
	".hidden", "-", "é", "\xff", "~", "*", "a.json", "x.json.tmp",
	strings.Repeat("l", 100), strings.Repeat("l", 101), strings.Repeat("l", 250), strings.Repeat("l", 5000),
	strings.Repeat("/", 70), strings.Repeat("\x00", 70), strings.Repeat("_", 67), strings.Repeat("%", 67),
	strings.Repeat("l", 200) + "\x00", strings.Repeat("l", 200) + "\x00x", "\x00" + strings.Repeat("l", 200),
}

// awkwardKeys is every combination of awkward parts, plus keys that differ
// only in where a NUL or '_' splits them.
func awkwardKeys() []Key {
	var keys []Key
	for _, n := range awkwardParts {
		for _, c := range awkwardParts {
			for _, i := range []string{"net1", "..", "a\x00", "a", strings.Repeat("i", 300), "_"} {
				keys = append(keys, Key{n, c, i})
			}
		}
	}
	long := strings.Repeat("l", 200)
	return append(keys,
		Key{"x", "y\x00" + long, "i"}, Key{"x\x00y", long, "i"}, Key{"x\x00y\x00" + long, "", "i"},
		Key{"x", "y_" + long, "i"}, Key{"x_y", long, "i"},
		Key{long, "c\x00i", ""}, Key{long, "c", "i"}, Key{long + "\x00c", "i", ""},
	)
}

// short shows a key part readably in a failure: long runs are elided.
func short(k Key) string {
	f := func(s string) string {
		if len(s) > 24 {
			return fmt.Sprintf("%q…(%d bytes)", s[:12], len(s))
		}
		return fmt.Sprintf("%q", s)
	}
	return "{" + f(k.Network) + ", " + f(k.ContainerID) + ", " + f(k.IfName) + "}"
}

// TestKeyPaths is a property over the generated key set: every key's file
// is a usable name directly under the records directory, and distinct keys
// never share a file.
func TestKeyPaths(t *testing.T) {
	s := NewStore(t.TempDir())
	recordDir := s.recordDir()
	byPath := map[string]Key{}
	var collisions []string
	keys := awkwardKeys()
	for _, k := range keys {
		p := s.Path(k)
		if filepath.Dir(p) != recordDir {
			t.Errorf("key %s: path %q is not directly under %s", short(k), p, recordDir)
			continue
		}
		base := filepath.Base(p)
		if base == "." || base == ".." || strings.ContainsAny(base, "/\x00") || len(base) > 255 {
			t.Errorf("key %s: unusable file name %q", short(k), base)
			continue
		}
		if other, dup := byPath[p]; dup && other != k {
			collisions = append(collisions, fmt.Sprintf("%s and %s share %s", short(other), short(k), base))
			continue
		}
		byPath[p] = k
	}
	if len(collisions) > 0 {
		t.Errorf("%d of %d keys collide; first ones:\n%s", len(collisions), len(keys),
			strings.Join(collisions[:min(3, len(collisions))], "\n"))
	}
}

// TestKeyRoundTrip saves a record under each of a sample of awkward keys
// (long, NUL-bearing, dot-leading, escaping-prone) and checks Load and List
// return exactly them and nothing lands outside the records directory.
func TestKeyRoundTrip(t *testing.T) {
	s := NewStore(t.TempDir())
	recordDir := s.recordDir()
	saved := map[string]Key{} // by file, so colliding keys (TestKeyPaths) do not fail this test too
	for i, k := range awkwardKeys() {
		// JSON cannot carry invalid UTF-8, so such a key cannot round trip
		// (TestKeyPaths still covers its file name); dot-leading networks
		// have their own test, TestListReturnsDotLeadingKeys.
		if i%17 != 0 || !utf8.ValidString(k.String()) || strings.HasPrefix(k.Network, ".") {
			continue
		}
		if err := s.Save(sampleRecord(k.Network, k.ContainerID, k.IfName)); err != nil {
			t.Fatalf("Save %s: %v", short(k), err)
		}
		saved[s.Path(k)] = k
	}
	for _, k := range saved {
		got, err := s.Load(k)
		if err != nil {
			t.Errorf("Load %s: %v", short(k), err)
			continue
		}
		if got.Key() != k {
			t.Errorf("Load %s returned the record of %s", short(k), short(got.Key()))
		}
	}
	recs, err := s.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	listed := map[Key]bool{}
	for _, r := range recs {
		listed[r.Key()] = true
	}
	var missing []string
	for _, k := range saved {
		if !listed[k] {
			missing = append(missing, fmt.Sprintf("%s (file %.40s)", short(k), filepath.Base(s.Path(k))))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("List returned %d of %d saved records; missing e.g.:\n%s", len(recs), len(saved),
			strings.Join(missing[:min(3, len(missing))], "\n"))
	}
	err = filepath.WalkDir(s.Dir(), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != s.Dir() && path != recordDir && filepath.Dir(path) != recordDir {
			t.Errorf("file outside the records directory: %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestListReturnsDotLeadingKeys: a network or container ID starting with
// '.' is a valid key part (config.ValidateKeyPart accepts ".x"), so List,
// which GC relies on, must return its record.
func TestListReturnsDotLeadingKeys(t *testing.T) {
	s := NewStore(t.TempDir())
	k := Key{".ib-net", "c0ffee", "net1"}
	if err := s.Save(sampleRecord(k.Network, k.ContainerID, k.IfName)); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	if err != nil || len(recs) != 1 || recs[0].Key() != k {
		t.Errorf("List after saving %s = %d records, %v; want that record (file %s)",
			short(k), len(recs), err, filepath.Base(s.Path(k)))
	}
}

func TestListSortsSkipsTempAndReportsCorrupt(t *testing.T) {
	s := NewStore(t.TempDir())
	for _, k := range []Key{{"net-b", "c1", "net1"}, {"net-a", "c2", "net2"}, {"net-a", "c1", "net1"}} {
		if err := s.Save(sampleRecord(k.Network, k.ContainerID, k.IfName)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(s.recordDir(), name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".tmp-123456", "{half a reco")        // a crashed Save
	write(".tmp-99.json", "{half")              // temp file that happens to end in .json
	write(".probe-1", "")                       // a crashed Writable
	write("README", "not a record")             // not ours
	write("corrupt_c_i.json", "{not json")      // a broken record
	write("future_c_i.json", `{"version": 99}`) // a record from a newer plugin
	if err := os.Mkdir(filepath.Join(s.recordDir(), "dir.json"), 0o700); err != nil {
		t.Fatal(err)
	}

	recs, err := s.List()
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key().String())
	}
	if diff := cmp.Diff([]string{"net-a/c1/net1", "net-a/c2/net2", "net-b/c1/net1"}, keys); diff != "" {
		t.Errorf("List keys (-want +got):\n%s", diff)
	}
	if err == nil {
		t.Fatal("List reported no error for the corrupt records")
	}
	for _, name := range []string{"corrupt_c_i.json", "future_c_i.json", "dir.json"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("List error does not name %s:\n%v", name, err)
		}
	}
	for _, name := range []string{".tmp-", ".probe-", "README"} {
		if strings.Contains(err.Error(), name) {
			t.Errorf("List error mentions %s, which it should have skipped:\n%v", name, err)
		}
	}
}

func TestRecordVersion(t *testing.T) {
	tests := []struct {
		name, data string
		ok         bool
	}{
		{"current", fmt.Sprintf(`{"version": %d, "network": "n", "containerID": "c", "ifName": "i"}`, RecordVersion), true},
		{"version 0", `{"version": 0, "network": "n", "containerID": "c", "ifName": "i"}`, false},
		{"no version", `{"network": "n", "containerID": "c", "ifName": "i"}`, false},
		{"negative", `{"version": -1, "network": "n", "containerID": "c", "ifName": "i"}`, false},
		{"future", fmt.Sprintf(`{"version": %d, "network": "n", "containerID": "c", "ifName": "i"}`, RecordVersion+1), false},
		{"not JSON", `{"version": 1,`, false},
		{"empty file", ``, false},
		{"wrong type", `{"version": "1"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(t.TempDir())
			k := Key{"n", "c", "i"}
			if err := os.MkdirAll(s.recordDir(), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path(k), []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			rec, err := s.Load(k)
			if (err == nil) != tc.ok {
				t.Fatalf("Load = %+v, %v; want ok=%v", rec, err, tc.ok)
			}
			if err != nil && errors.Is(err, ErrNotFound) {
				t.Errorf("a present but unusable record reads as ErrNotFound: %v", err)
			}
		})
	}
}

// TestLockVFExcludes holds a VF lock and checks a second locker (another
// open of the same lock file, as another plugin process would have) waits
// until it is released.
func TestLockVFExcludes(t *testing.T) {
	dir := t.TempDir()
	first, second := NewStore(dir), NewStore(dir)
	release, err := first.LockVF("0000:18:00.2")
	if err != nil {
		t.Fatalf("LockVF: %v", err)
	}

	// Deterministic: while held, a non-blocking flock on the lock file fails.
	if !heldByOther(t, filepath.Join(first.lockDir(), "0000:18:00.2.lock")) {
		t.Fatal("lock file is not locked while LockVF's lock is held")
	}

	started, acquired := make(chan struct{}), make(chan *VFLock, 1)
	go func() {
		close(started)
		rel, err := second.LockVF("0000:18:00.2")
		if err != nil {
			t.Errorf("second LockVF: %v", err)
		}
		acquired <- rel
	}()
	<-started
	// A locker that did not wait would be done long before this.
	select {
	case rel := <-acquired:
		if rel != nil {
			rel.Unlock()
		}
		t.Fatal("second LockVF returned while the first lock was held")
	case <-time.After(200 * time.Millisecond):
	}

	// A different VF is not blocked by it.
	other, err := second.LockVF("0000:18:00.3")
	if err != nil {
		t.Fatalf("LockVF of another VF: %v", err)
	}
	other.Unlock()

	release.Unlock()
	select {
	case rel := <-acquired:
		if rel != nil {
			rel.Unlock()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second LockVF still waiting 10s after the first lock was released")
	}
	if heldByOther(t, filepath.Join(first.lockDir(), "0000:18:00.2.lock")) {
		t.Error("lock still held after both releases")
	}
}

func heldByOther(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return false
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock %s: %v", path, err)
	}
	return true
}

func TestLockVFRejects(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir)
	for _, pci := range []string{"", "../x", "..", ".", ".hidden", "a/b", "/etc/passwd", "0000:18:00.2\x00", "x/../../y"} {
		if rel, err := s.LockVF(pci); err == nil {
			rel.Unlock()
			t.Errorf("LockVF(%q) succeeded", pci)
		}
	}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("rejected lock left %s", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		ok        bool
	}{
		{"existing dir", t.TempDir(), true},
		{"dir to create", filepath.Join(t.TempDir(), "a", "b"), true},
		{"under a regular file", filepath.Join(file, "state"), false},
		{"is a regular file", file, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(tc.dir)
			err := s.Writable()
			if (err == nil) != tc.ok {
				t.Fatalf("Writable() = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok {
				assertOnlyRecords(t, s, 0) // the probe file is gone
			}
		})
	}
}

// claimKeys runs Claims under a fresh lock and returns the claiming keys.
func claimKeys(t *testing.T, s *Store, pci string, self Key) []string {
	t.Helper()
	l, err := s.LockVF(pci)
	if err != nil {
		t.Fatalf("LockVF: %v", err)
	}
	defer l.Unlock()
	recs, err := l.Claims(pci, self)
	if err != nil {
		t.Fatalf("Claims: %v", err)
	}
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key().String())
	}
	return keys
}

// own does what ADD does under the lock: index, then save.
func own(t *testing.T, s *Store, r *Record) {
	t.Helper()
	l, err := s.LockVF(r.PCI)
	if err != nil {
		t.Fatalf("LockVF: %v", err)
	}
	defer l.Unlock()
	if err := l.SetOwner(r.Key(), ""); err != nil {
		t.Fatalf("SetOwner: %v", err)
	}
	if err := s.Save(r); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

// TestVFOwnerIndex walks the owner index through ADD, DEL, a kill between
// index and record, a torn index, and records written before the index
// existed, comparing Claims with what a scan of every record says.
func TestVFOwnerIndex(t *testing.T) {
	const pci = "0000:18:00.2"
	s := NewStore(t.TempDir())
	a, b := sampleRecord("ib", "aaaa", "net1"), sampleRecord("ib", "bbbb", "net1")
	other := sampleRecord("ib", "cccc", "net1")
	other.PCI = "0000:18:00.3"
	own(t, s, other)
	lockFile := filepath.Join(s.lockDir(), pci+".lock")

	if got := claimKeys(t, s, pci, b.Key()); got != nil {
		t.Fatalf("no owner yet: Claims = %v", got)
	}
	own(t, s, a)
	if got, want := claimKeys(t, s, pci, b.Key()), []string{a.Key().String()}; !slices.Equal(got, want) {
		t.Errorf("after A's ADD, Claims for B = %v, want %v", got, want)
	}
	if got := claimKeys(t, s, pci, a.Key()); got != nil {
		t.Errorf("A's own claim is not another's: Claims for A = %v", got)
	}
	// The index is read, not the records: a record of the VF that the
	// index does not name is invisible (only a foreign writer makes one).
	stray := sampleRecord("ib", "dddd", "net1")
	if err := s.Save(stray); err != nil {
		t.Fatal(err)
	}
	if got, want := claimKeys(t, s, pci, b.Key()), []string{a.Key().String()}; !slices.Equal(got, want) {
		t.Errorf("with the index naming A, Claims = %v, want only %v", got, want)
	}
	if err := s.Delete(stray.Key()); err != nil {
		t.Fatal(err)
	}

	// B's DEL (not the owner) leaves A's index; A's DEL frees it.
	free := func(k Key) {
		t.Helper()
		l, err := s.LockVF(pci)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock()
		if err := l.Free(k); err != nil {
			t.Fatalf("Free: %v", err)
		}
	}
	free(b.Key())
	if got := claimKeys(t, s, pci, b.Key()); len(got) != 1 {
		t.Errorf("B's Free cleared A's claim: Claims = %v", got)
	}
	if err := s.Delete(a.Key()); err != nil {
		t.Fatal(err)
	}
	free(a.Key())
	if data, _ := os.ReadFile(lockFile); strings.TrimRight(string(data), " \n") != indexFree || len(data) != indexSize {
		t.Errorf("lock file after A's DEL = %q, want %q padded to %d bytes", data, indexFree, indexSize)
	}

	// Killed between index and record: the owner has no record, so no claim.
	l, err := s.LockVF(pci)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetOwner(a.Key(), ""); err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	if got := claimKeys(t, s, pci, b.Key()); got != nil {
		t.Errorf("owner without a record: Claims = %v, want none", got)
	}

	// Records from before the index (empty lock file) and torn or foreign
	// index lines are found by reading every record.
	pad := func(line string) string { return line + strings.Repeat(" ", indexSize-1-len(line)) + "\n" }
	for _, content := range []string{"", "own", pad("owner ../x.json"), pad("owner " + fileName(other.Key())),
		"owner " + fileName(a.Key()) + "\n", pad("owner " + fileName(a.Key()))[1:], "\x00\x00", pad("free")[:100]} {
		if err := s.Save(a); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lockFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, want := claimKeys(t, s, pci, b.Key()), []string{a.Key().String()}; !slices.Equal(got, want) {
			t.Errorf("lock file %q: Claims = %v, want %v (from the scan)", content, got, want)
		}
	}
	// Without an index, a DEL of the owner leaves it none: other records
	// of the VF from before the index may exist.
	if err := os.WriteFile(lockFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	free(a.Key())
	if data, _ := os.ReadFile(lockFile); len(data) != 0 {
		t.Errorf("Free without an index wrote %q", data)
	}
	// A whole "free" index is trusted.
	if err := os.WriteFile(lockFile, []byte(pad(indexFree)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, pci, b.Key()); got != nil {
		t.Errorf("free index: Claims = %v, want none", got)
	}
}

// TestListSweepsStaleTemps: temp and probe files older than staleTempAge
// (left by killed writers) go; fresh ones (a write in flight) and anything
// else stay.
func TestListSweepsStaleTemps(t *testing.T) {
	s := NewStore(t.TempDir())
	if err := s.Save(sampleRecord("n", "c", "net1")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleTempAge)
	for name, aged := range map[string]bool{".tmp-old": true, ".probe-old": true, ".tmp-fresh": false, "old-notes": true} {
		path := filepath.Join(s.recordDir(), name)
		if err := os.WriteFile(path, []byte("{half"), 0o600); err != nil {
			t.Fatal(err)
		}
		if aged {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.List(); err != nil {
		t.Fatalf("List: %v", err)
	}
	if names, want := recordDirNames(t, s), []string{".tmp-fresh", "n_c_net1.json", "old-notes"}; !slices.Equal(names, want) {
		t.Errorf("after List the record dir holds %v, want %v", names, want)
	}
}

// TestRemoveUnreadableBefore: only records that cannot be read and are
// older than the cut go; readable old records (GC judges those by key) and
// unreadable new ones (maybe a write of this boot) stay.
func TestRemoveUnreadableBefore(t *testing.T) {
	s := NewStore(t.TempDir())
	good := sampleRecord("n", "old-good", "net1")
	if err := s.Save(good); err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(-time.Hour)
	old := cut.Add(-time.Hour)
	files := map[string]struct {
		data string
		old  bool
	}{
		"n_old-empty_net1.json":  {"", true},
		"n_old-torn_net1.json":   {`{"version":1,"net`, true},
		"n_old-newer_net1.json":  {`{"version":99}`, true},
		"n_new-empty_net1.json":  {"", false},
		fileName(good.Key()):     {"", true}, // rewritten below: stays readable
		".tmp-old-but-temp.json": {"", true},
	}
	for name, f := range files {
		path := filepath.Join(s.recordDir(), name)
		if name != fileName(good.Key()) {
			if err := os.WriteFile(path, []byte(f.data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if f.old {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, err := s.RemoveUnreadableBefore(cut)
	if err != nil {
		t.Fatalf("RemoveUnreadableBefore: %v", err)
	}
	slices.Sort(removed)
	if want := []string{"n_old-empty_net1.json", "n_old-newer_net1.json", "n_old-torn_net1.json"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if want := []string{".tmp-old-but-temp.json", "n_new-empty_net1.json", fileName(good.Key())}; !slices.Equal(recordDirNames(t, s), want) {
		t.Errorf("left %v, want %v", recordDirNames(t, s), want)
	}
}

// A directory where a record belongs fails Save with an error naming the
// path, and leaves no temp file behind.
func TestSaveOverDirectoryFails(t *testing.T) {
	s := NewStore(t.TempDir())
	rec := sampleRecord("ib-net", "c0ffee", "net1")
	if err := os.MkdirAll(s.Path(rec.Key()), 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.Save(rec)
	if err == nil || !strings.Contains(err.Error(), s.Path(rec.Key())) {
		t.Fatalf("Save over a directory = %v, want an error naming %s", err, s.Path(rec.Key()))
	}
	entries, err := os.ReadDir(filepath.Dir(s.Path(rec.Key())))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("records dir holds %v after a failed Save, want only the directory in the way", entries)
	}
}

// TestLongKeyNameIsStable: an over-long key's file name is "h-" and the
// SHA-256 of its escaped name, as every release so far wrote it; a record
// written before an upgrade must be found under the same name after it.
func TestLongKeyNameIsStable(t *testing.T) {
	k := Key{Network: strings.Repeat("n", 150), ContainerID: strings.Repeat("c", 64), IfName: "net1"}
	escaped := escape(k.Network) + "_" + escape(k.ContainerID) + "_" + escape(k.IfName)
	sum := sha256.Sum256([]byte(escaped))
	if got, want := fileName(k), "h-"+hex.EncodeToString(sum[:])+".json"; got != want {
		t.Errorf("fileName = %s, want %s", got, want)
	}
}

// TestOwnersOf: the GUID directory lists the VFs entered under a GUID with
// their owners' records; Free and a later entry under another GUID take a
// VF's entry away.
func TestOwnersOf(t *testing.T) {
	s := NewStore(t.TempDir())
	const g0, g1 = "a288:c2ff:fe18:0000", "a288:c2ff:fe18:0001"
	own := func(pci, container, guid string) {
		t.Helper()
		l, err := s.LockVF(pci)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock()
		k := Key{"ib", container, "net1"}
		if err := l.SetOwner(k, guid); err != nil {
			t.Fatal(err)
		}
		if err := l.IndexGUID(k, guid); err != nil {
			t.Fatal(err)
		}
	}
	owners := func(guid string) []string {
		t.Helper()
		got, err := s.OwnersOf(guid)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range got {
			out = append(out, o.PCI+" "+o.record)
		}
		return out
	}
	if got := owners(g0); got != nil {
		t.Fatalf("no GUID directory yet: %v", got)
	}
	own("0000:18:00.2", "c1", g0)
	own("0000:18:00.3", "c2", g0)
	own("0000:18:00.4", "c3", g1)
	want := []string{"0000:18:00.2 " + fileName(Key{"ib", "c1", "net1"}), "0000:18:00.3 " + fileName(Key{"ib", "c2", "net1"})}
	if diff := cmp.Diff(want, owners(g0)); diff != "" {
		t.Errorf("OwnersOf(%s) (-want +got):\n%s", g0, diff)
	}
	own("0000:18:00.3", "c4", g1) // a new owner with another GUID: its old entry goes
	l, err := s.LockVF("0000:18:00.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Free(Key{"ib", "c1", "net1"}); err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	if got := owners(g0); got != nil {
		t.Errorf("after Free and a new GUID, OwnersOf(%s) = %v, want none", g0, got)
	}
	want = []string{"0000:18:00.3 " + fileName(Key{"ib", "c4", "net1"}), "0000:18:00.4 " + fileName(Key{"ib", "c3", "net1"})}
	if diff := cmp.Diff(want, owners(g1)); diff != "" {
		t.Errorf("OwnersOf(%s) (-want +got):\n%s", g1, diff)
	}
	if err := l.SetOwner(Key{"ib", "x", "net1"}, "not a guid"); err == nil {
		t.Error("SetOwner took a GUID with a space in it")
	}
}

func TestParseOwner(t *testing.T) {
	for line, want := range map[string][2]string{
		"owner ib_c_net1.json":                          {"ib_c_net1.json", ""},
		"owner ib_c_net1.json guid a288:c2ff:fe18:0000": {"ib_c_net1.json", "a288:c2ff:fe18:0000"},
		"owner ib_c_net1.json guid":                     {},
		"owner ../x.json":                               {},
		"owner a/b.json":                                {},
		"owner ib_c_net1.txt":                           {},
		"free":                                          {},
		"owner ib_c_net1.json extra a288:c2ff:fe18:0000": {},
	} {
		file, guid, ok := parseOwner(line)
		if ok != (want[0] != "") || file != want[0] || guid != want[1] {
			t.Errorf("parseOwner(%q) = %q, %q, %v; want %q, %q", line, file, guid, ok, want[0], want[1])
		}
	}
}

// BenchmarkOwnersOf is what ADD's exclusive-mode duplicate check reads on
// a DGX node whose 64 VFs are all attached.
func BenchmarkOwnersOf(b *testing.B) {
	s := NewStore(b.TempDir())
	for i := range 64 {
		l, err := s.LockVF(fmt.Sprintf("0000:18:%02x.%d", i/8, i%8))
		if err != nil {
			b.Fatal(err)
		}
		k, g := Key{"ib", fmt.Sprint(i), "net1"}, fmt.Sprintf("a288:c2ff:fe18:%04x", i)
		if err := l.SetOwner(k, g); err != nil {
			b.Fatal(err)
		}
		if err := l.IndexGUID(k, g); err != nil {
			b.Fatal(err)
		}
		l.Unlock()
	}
	for b.Loop() {
		if got, err := s.OwnersOf("a288:c2ff:fe18:0007"); err != nil || len(got) != 1 {
			b.Fatalf("%d owners, %v", len(got), err)
		}
	}
}

// TestLockGUIDExcludes: a GUID lock held makes a second locker of that
// GUID wait until it is released; another GUID is not blocked, and a name
// that is not a GUID makes no lock file.
func TestLockGUIDExcludes(t *testing.T) {
	dir := t.TempDir()
	first, second := NewStore(dir), NewStore(dir)
	const guid = "a088:c203:0018:1003"
	held, err := first.LockGUID(guid)
	if err != nil {
		t.Fatalf("LockGUID: %v", err)
	}
	if !heldByOther(t, filepath.Join(first.lockDir(), "guid-"+guid+".lock")) {
		t.Fatal("lock file is not locked while LockGUID's lock is held")
	}
	acquired := make(chan *GUIDLock, 1)
	go func() {
		l, err := second.LockGUID(guid)
		if err != nil {
			t.Errorf("second LockGUID: %v", err)
		}
		acquired <- l
	}()
	select {
	case l := <-acquired:
		if l != nil {
			l.Unlock()
		}
		t.Fatal("second LockGUID returned while the first lock was held")
	case <-time.After(200 * time.Millisecond):
	}
	other, err := second.LockGUID("a088:c203:0018:1004")
	if err != nil {
		t.Fatalf("LockGUID of another GUID: %v", err)
	}
	other.Unlock()
	held.Unlock()
	select {
	case l := <-acquired:
		if l != nil {
			l.Unlock()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second LockGUID still waiting 10s after the first lock was released")
	}
	for _, bad := range []string{"", "../../x", "a088:c203:0018", "A088:C203:0018:1003", "a088:c203:0018:1003/x"} {
		if l, err := first.LockGUID(bad); err == nil {
			l.Unlock()
			t.Errorf("LockGUID(%q) succeeded", bad)
		}
	}
	entries, err := os.ReadDir(first.lockDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("lock dir holds %d files, want the two GUIDs' locks", len(entries))
	}
}
