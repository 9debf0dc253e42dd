package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

// The fabric verdicts round-trip; none saved is fs.ErrNotExist (the ledger
// not deployed); a FIFO, 100 MB, another version or junk in their place
// is an error at once, naming the file.
func TestFabricVerdicts(t *testing.T) {
	s := NewStore(t.TempDir())
	if _, err := s.LoadFabricVerdicts(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no file: %v, want fs.ErrNotExist", err)
	}
	want := &FabricVerdicts{Node: "gpu-7", Mirrored: time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC), VFs: map[string][]FabricFinding{
		"0000:18:00.2": {{Kind: "DuplicateNodeGUID", GUID: "a288:c2ff:fe18:0000", Second: true, Others: []string{"gpu-1/0000:18:00.2"}}},
	}}
	if err := s.SaveFabricVerdicts(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadFabricVerdicts()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" || got.Version != FabricVersion {
		t.Errorf("round trip (-saved +loaded):\n%s", diff)
	}
	path := filepath.Join(s.Dir(), fabricFile)
	for name, write := range map[string]func(){
		"another version": func() { _ = os.WriteFile(path, []byte(`{"version":2,"vfs":{}}`), 0o600) },
		"junk":            func() { _ = os.WriteFile(path, []byte("\x00\x01"), 0o600) },
		"100 MB":          func() { _ = os.Remove(path); safefiletest.Sparse(t, path, 100<<20) },
	} {
		write()
		if _, err := s.LoadFabricVerdicts(); err == nil || !strings.Contains(err.Error(), path) && !errors.Is(err, safefile.ErrTooLarge) {
			t.Errorf("%s: %v, want an error naming %s", name, err, path)
		}
	}
	_ = os.Remove(path)
	safefiletest.FIFO(t, path)
	safefiletest.Within(t, safefiletest.Prompt, "LoadFabricVerdicts", func() { _, err = s.LoadFabricVerdicts() })
	if !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("a FIFO: %v, want ErrNotRegular", err)
	}
}
