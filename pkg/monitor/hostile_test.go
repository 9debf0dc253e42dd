package monitor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// TestSweepWithHostileRecords: a FIFO named like a record, a link to
// /dev/zero and 100 MB of junk in attachments/ do not stall the sweep;
// each is counted in record_read_errors, logged once as a warning naming
// what it is, and the good record is swept as before.
func TestSweepWithHostileRecords(t *testing.T) {
	f := newFixture(t, Config{})
	if err := f.store.Save(record("ib-a", "c1", filepath.Join(t.TempDir(), "gone"))); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(f.store.Dir(), "attachments")
	safefiletest.FIFO(t, filepath.Join(dir, "ib-a_fifo_net1.json"))
	safefiletest.Symlink(t, "/dev/zero", filepath.Join(dir, "ib-a_zero_net1.json"))
	safefiletest.Sparse(t, filepath.Join(dir, "ib-a_junk_net1.json"), 100<<20)
	for range 2 {
		safefiletest.Within(t, safefiletest.Prompt, "Sweep", func() { f.mon.Sweep(context.Background()) })
	}
	f.wantValue(t, 3, "sriov_stable_record_read_errors")
	f.wantValue(t, 1, "sriov_stable_attachments", "network", "ib-a", "status", "stale")
	for _, says := range []string{
		"ib-a_fifo_net1.json is a FIFO, not a regular file",
		"ib-a_zero_net1.json is a symbolic link to /dev/zero, not a regular file",
		"ib-a_junk_net1.json is larger than 1 MiB",
	} {
		if n := f.logs.Lines("level=WARN", "some attachment records are unreadable", "files=3", says); n != 1 {
			t.Errorf("%d warnings saying %q over two sweeps, want 1:\n%s", n, says, f.logs)
		}
	}
	if err := f.mon.Ready(); err != nil {
		t.Errorf("not ready with unreadable record files: %v", err)
	}
}

// TestPortPollSkipsHostileFiles: the port poller does not open a port file
// that is not a regular file (a FIFO: its read would never return); it
// polls the VF's other files, and the real file once it is back.
func TestPortPollSkipsHostileFiles(t *testing.T) {
	tree := sysfstest.New(t)
	const vf = "0000:18:00.2"
	tree.AddPF(testPF, 8, sysfstest.Device{})
	tree.AddVF(testPF, 0, vf, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_10", NodeGUID: "a288:c2ff:fe18:0000"}})
	state := filepath.Join(tree.RDMAPath(vf, "mlx5_10"), "ports", "1", "state")
	safefiletest.FIFO(t, state)
	p := newPortPoll(sysfs.Reader{Root: tree.Root}, vf)
	defer p.close()
	safefiletest.Within(t, safefiletest.Prompt, "the port poll", func() { p.baseline() })
	if len(p.files) != 2 {
		t.Errorf("polling %d files with ports/1/state a FIFO, want node_guid and link_layer", len(p.files))
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	tree.WriteFile(state, "4: ACTIVE")
	p.stale.Store(true) // a sweep: the files are opened anew
	safefiletest.Within(t, safefiletest.Prompt, "the port poll", func() { p.changed() })
	if len(p.files) != 3 {
		t.Errorf("polling %d files once ports/1/state is a file again, want 3", len(p.files))
	}
}
