package sysfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func TestScanGUIDsRoundTrip(t *testing.T) {
	tree := smallNode(t)
	tree.AddVF(pf0, 11, "0000:18:01.5", sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_21", NodeGUID: "zzzz"}})
	r := sysfs.Reader{Root: tree.Root}
	idx, err := r.ScanGUIDs()
	if err != nil {
		t.Fatalf("ScanGUIDs: %v", err)
	}
	var names []string
	for _, e := range idx.Entries {
		names = append(names, e.Name)
		if e.Ino == 0 {
			t.Errorf("%s has inode number 0", e.Name)
		}
	}
	if diff := cmp.Diff([]string{"mlx5_0", "mlx5_10", "mlx5_17", "mlx5_21"}, names); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// A node_guid that cannot be parsed is listed but holds no GUID.
	want := map[string]sysfs.GUID{"mlx5_0": 0xa088c20300181000, "mlx5_10": 0xa288c2fffe180000, "mlx5_17": 0xa288c2fffe180007}
	if diff := cmp.Diff(want, idx.GUIDs); diff != "" {
		t.Errorf("GUIDs (-want +got):\n%s", diff)
	}
	data, err := idx.MarshalText()
	if err != nil {
		t.Fatalf("MarshalText: %v", err)
	}
	var back sysfs.GUIDIndex
	if err := back.UnmarshalText(data); err != nil {
		t.Fatalf("UnmarshalText(%q): %v", data, err)
	}
	if diff := cmp.Diff(idx, &back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if ok, err := r.Current(&back); !ok || err != nil {
		t.Errorf("Current right after the scan = %v, %v; want true", ok, err)
	}
	if ok, err := (sysfs.Reader{Root: tree.Root + "/other"}).Current(&back); ok || err != nil {
		t.Errorf("Current under another root = %v, %v; want false", ok, err)
	}
}

// TestGUIDIndexGoesStale: adding, removing or re-probing a device changes
// the listing; a GUID rewritten in place (which real devices do not do)
// does not, which is why a duplicate found in a reused index is confirmed.
func TestGUIDIndexGoesStale(t *testing.T) {
	tree := smallNode(t)
	r := sysfs.Reader{Root: tree.Root}
	changes := []struct {
		name    string
		change  func()
		current bool
	}{
		{"nothing", func() {}, true},
		{"GUID rewritten in place", func() {
			tree.WriteFile(filepath.Join(tree.RDMAPath(vf7, "mlx5_17"), "node_guid"), "a288:c2ff:fe18:0000")
		}, true},
		{"device re-probed", func() {
			tree.ReprobeRDMA(vf7, sysfstest.RDMA{Name: "mlx5_17", NodeGUID: "a288:c2ff:fe18:0000"})
		}, false},
		{"device added", func() {
			tree.AddVF(pf0, 2, "0000:18:00.4", sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_12", NodeGUID: "a288:c2ff:fe18:0002"}})
		}, false},
		{"device removed", func() {
			if err := os.Remove(filepath.Join(tree.Root, "class", "infiniband", "mlx5_17")); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, c := range changes {
		idx, err := r.ScanGUIDs()
		if err != nil {
			t.Fatalf("ScanGUIDs: %v", err)
		}
		c.change()
		if got, err := r.Current(idx); got != c.current || err != nil {
			t.Errorf("%s: Current = %v, %v; want %v", c.name, got, err, c.current)
		}
	}
}

func TestGUIDIndexHolders(t *testing.T) {
	idx := &sysfs.GUIDIndex{
		Entries: []sysfs.RDMAEntry{{Name: "mlx5_1", Ino: 11}, {Name: "mlx5_2", Ino: 12}, {Name: "mlx5_3", Ino: 13}},
		GUIDs:   map[string]sysfs.GUID{"mlx5_3": 7, "mlx5_1": 7, "mlx5_2": 8},
	}
	if diff := cmp.Diff([]string{"mlx5_1", "mlx5_3"}, idx.Holders(7)); diff != "" {
		t.Errorf("Holders(7) (-want +got):\n%s", diff)
	}
	if got := idx.Holders(9); got != nil {
		t.Errorf("Holders(9) = %v, want none", got)
	}
}

func TestGUIDIndexUnmarshalRejects(t *testing.T) {
	const head = "sriov-stable-cni guid-index 1\nroot /sys\n"
	cases := map[string]string{
		"empty":            "",
		"other version":    "sriov-stable-cni guid-index 2\nroot /sys\n",
		"no root":          "sriov-stable-cni guid-index 1\nmlx5_0 1 -\n",
		"short line":       head + "mlx5_0 12\n",
		"bad inode":        head + "mlx5_0 x a288:c2ff:fe18:0000\n",
		"bad GUID":         head + "mlx5_0 12 nope\n",
		"out of order":     head + "mlx5_1 12 -\nmlx5_0 13 -\n",
		"repeated device":  head + "mlx5_0 12 -\nmlx5_0 13 -\n",
		"no final newline": head + "mlx5_0 12 -",
	}
	for name, data := range cases {
		var idx sysfs.GUIDIndex
		if err := idx.UnmarshalText([]byte(data)); err == nil || !strings.Contains(err.Error(), "decode GUID index") {
			t.Errorf("%s: UnmarshalText = %v, want a decode error", name, err)
		}
	}
}

// TestCurrentWithoutInfiniband: with no class/infiniband (no RDMA stack
// loaded), an index of no devices is current and one of some devices is not.
func TestCurrentWithoutInfiniband(t *testing.T) {
	r := sysfs.Reader{Root: t.TempDir()}
	if ok, err := r.Current(&sysfs.GUIDIndex{Root: r.Root}); !ok || err != nil {
		t.Errorf("Current of an empty index = %v, %v; want true", ok, err)
	}
	idx := &sysfs.GUIDIndex{Root: r.Root, Entries: []sysfs.RDMAEntry{{Name: "mlx5_0", Ino: 1}}}
	if ok, err := r.Current(idx); ok || err != nil {
		t.Errorf("Current of an index with a device = %v, %v; want false", ok, err)
	}
}

// FuzzGUIDIndexUnmarshal: any saved index either fails to decode or
// decodes to one that encodes and decodes back to itself; none panics.
func FuzzGUIDIndexUnmarshal(f *testing.F) {
	f.Add([]byte("sriov-stable-cni guid-index 1\nroot /sys\nmlx5_0 12 a288:c2ff:fe18:0000\nmlx5_1 13 -\n"))
	f.Add([]byte("sriov-stable-cni guid-index 1\nroot \n"))
	f.Add([]byte("sriov-stable-cni guid-index 1\nroot /sys\nmlx5_0 99999999999999999999 -\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var idx sysfs.GUIDIndex
		if idx.UnmarshalText(data) != nil {
			return
		}
		again, err := idx.MarshalText()
		if err != nil {
			t.Fatalf("decoded %q but cannot encode it: %v", data, err)
		}
		var back sysfs.GUIDIndex
		if err := back.UnmarshalText(again); err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", again, err)
		}
		if diff := cmp.Diff(idx, back); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", data, diff)
		}
	})
}
