package state

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// fabricFile holds the fabric controller's verdict on this node's VFs, as
// the node agent mirrors it from its NodeVFSet's status: how the plugin
// learns of a GUID another node holds without calling the API server.
const fabricFile = "fabric-verdicts.json"

// FabricVersion is the version of the verdict file this release writes.
const FabricVersion = 1

// FabricVerdicts is the fabric controller's word on a node's VFs.
type FabricVerdicts struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	// Mirrored is when the agent wrote the file from the status.
	Mirrored time.Time `json:"mirrored"`
	// VFs are the findings by PCI address; a VF without any is absent.
	VFs map[string][]FabricFinding `json:"vfs"`
}

// FabricFinding is one of the controller's findings about a VF: the
// fields of the NodeVFSet status the plugin acts on.
type FabricFinding struct {
	Kind string `json:"kind"` // DuplicateNodeGUID, DuplicatePortGUID, ...
	GUID string `json:"guid"`
	// Second: another VF published this GUID first and keeps it.
	Second bool `json:"second,omitempty"`
	// Others are the other holders, "node/pci", first first.
	Others  []string `json:"others,omitempty"`
	Message string   `json:"message,omitempty"`
}

// LoadFabricVerdicts reads the mirrored verdicts: an error satisfying
// errors.Is(err, fs.ErrNotExist) when the fabric ledger is not deployed.
// The file is read as any state file: regular, not through a link,
// bounded.
func (s *Store) LoadFabricVerdicts() (*FabricVerdicts, error) {
	data, err := safefile.ReadFile(filepath.Join(s.dir, fabricFile), MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read the fabric verdicts: %w", err)
	}
	v := new(FabricVerdicts)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("fabric verdicts %s: %w", filepath.Join(s.dir, fabricFile), err)
	}
	if v.Version != FabricVersion {
		return nil, fmt.Errorf("fabric verdicts %s: version %d, this release reads %d", filepath.Join(s.dir, fabricFile), v.Version, FabricVersion)
	}
	return v, nil
}

// SaveFabricVerdicts replaces the verdicts atomically.
func (s *Store) SaveFabricVerdicts(v *FabricVerdicts) error {
	v.Version = FabricVersion
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the fabric verdicts: %w", err)
	}
	if len(data) > MaxFileSize {
		return fmt.Errorf("fabric verdicts of %d VFs are %d bytes, over the %d a reader accepts", len(v.VFs), len(data), MaxFileSize)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return writeAtomic(filepath.Join(s.dir, fabricFile), data)
}
