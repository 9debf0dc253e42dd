package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// verbBound is how long one verb of the chain may take with hostile files
// in the state dir. A verb takes well under a second here; the bound only
// tells a finished verb from one waiting on a FIFO, which libcni then
// kills (its exec follows the context).
const verbBound = 30 * time.Second

// TestHostileRecordFiles: a FIFO named like a record, a link to /dev/zero
// and 100 MB of junk in attachments/ (beside a real attachment) do not
// stall the plugin. An ADD whose VF lock has no owner index yet reads every
// record; CHECK, GC and DEL go on as usual; the unreadable files are logged
// by name, and left where they are.
func TestHostileRecordFiles(t *testing.T) {
	e := newEnv(t, vfOpts{rdma: true, numVFs: 2})
	c0, c1 := e.chain("1.1.0", 0, nil), e.chain("1.1.0", 1, nil)
	r0, r1 := rt("c-hostile-0", testutil.NewNetns(t)), rt("c-hostile-1", testutil.NewNetns(t))
	if _, err := c0.Add(r0); err != nil {
		t.Fatalf("ADD: %v\nlog:\n%s", err, e.logTail())
	}
	dir := filepath.Join(e.stateDir, "attachments")
	hostile := map[string]string{
		filepath.Join(dir, "vfnet_c-fifo_net1.json"): "is a FIFO, not a regular file",
		filepath.Join(dir, "vfnet_c-zero_net1.json"): "is a symbolic link to /dev/zero, not a regular file",
		filepath.Join(dir, "vfnet_c-junk_net1.json"): "is larger than 1 MiB",
	}
	for path := range hostile {
		switch {
		case strings.Contains(path, "fifo"):
			safefiletest.FIFO(t, path)
		case strings.Contains(path, "zero"):
			safefiletest.Symlink(t, "/dev/zero", path)
		default:
			safefiletest.Sparse(t, path, 100<<20)
		}
	}
	ghost := &state.Record{Network: "vfnet", ContainerID: "c-ghost", IfName: "net1", PCI: "0000:18:00.7"}
	if err := state.NewStore(e.stateDir).Save(ghost); err != nil {
		t.Fatal(err)
	}

	verb := func(name string, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), verbBound)
		defer cancel()
		start := time.Now()
		if err := fn(ctx); err != nil {
			t.Fatalf("%s with hostile record files (after %v): %v\nlog:\n%s", name, time.Since(start).Round(time.Millisecond), err, e.logTail())
		}
	}
	verb("ADD of a second VF", func(ctx context.Context) error { _, err := c1.CNI.AddNetworkList(ctx, c1.List, r1); return err })
	verb("CHECK", func(ctx context.Context) error { return c0.CNI.CheckNetworkList(ctx, c0.List, r0) })
	verb("GC", func(ctx context.Context) error {
		return c0.CNI.GCNetworkList(ctx, c0.List, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{
			{ContainerID: r0.ContainerID, IfName: "net1"}, {ContainerID: r1.ContainerID, IfName: "net1"}}})
	})
	if _, err := state.NewStore(e.stateDir).Load(ghost.Key()); err == nil {
		t.Error("GC left the record of an attachment that is not valid")
	}
	verb("DEL", func(ctx context.Context) error { return c0.CNI.DelNetworkList(ctx, c0.List, r0) })
	verb("DEL of the second VF", func(ctx context.Context) error { return c1.CNI.DelNetworkList(ctx, c1.List, r1) })
	e.wantHome(0)
	e.wantHome(1)

	var left []string
	for _, f := range e.records() {
		left = append(left, filepath.Base(f))
	}
	slices.Sort(left)
	if want := []string{"vfnet_c-fifo_net1.json", "vfnet_c-junk_net1.json", "vfnet_c-zero_net1.json"}; !slices.Equal(left, want) {
		t.Errorf("state dir holds %v after DEL, want only the hostile files %v", left, want)
	}
	log, err := os.ReadFile(filepath.Join(e.stateDir, "..", "plugin.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"msg=\"some records are unreadable\"", "msg=\"GC: some records are unreadable\""} {
		for path, says := range hostile {
			if !hasLine(string(log), prefix, path+" "+says) {
				t.Errorf("no log line %s saying %q", prefix, path+" "+says)
			}
		}
	}
}

func hasLine(log string, parts ...string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
