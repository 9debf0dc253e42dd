package nodesync

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/controller"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabrictest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/publish"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const node = "gpu-a"

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// start runs a syncer for node over api, with the fixture's sysfs and a
// state directory of its own, until the test ends.
func start(t *testing.T, api *fabrictest.Tracker, root string, uid func() (types.UID, bool), onVerdicts func(map[string][]state.FabricFinding)) (*Syncer, *state.Store) {
	t.Helper()
	store := state.NewStore(t.TempDir())
	s, err := New(Config{Client: api, Node: node, NodeUID: uid, Sysfs: sysfs.Reader{Root: root}, Store: store,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), OnVerdicts: onVerdicts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s, store
}

// The node's VFs are published once its Node's UID is known, owned by
// that Node; a pod's record written adds the pod to its VF at once (the
// record watch), and nothing else is written while nothing changes.
func TestPublishesOnUIDThenOnRecordChange(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	api := fabrictest.New(t, publish.FieldManager, controller.FieldManager)
	var known atomic.Bool
	_, store := start(t, api, n.Root, func() (types.UID, bool) { return "uid-a", known.Load() }, nil)
	time.Sleep(200 * time.Millisecond)
	if api.Object(node) != nil {
		t.Fatal("published before the node's UID was known")
	}
	known.Store(true)
	waitFor(t, "the node's object", func() bool { return api.Object(node) != nil })
	obj := api.Object(node)
	if want := len(n.PFs) * len(n.PFs[0].VFs); len(obj.Spec.VFs) != want {
		t.Errorf("%d VFs published, want %d", len(obj.Spec.VFs), want)
	}
	if o := obj.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != node || o[0].UID != "uid-a" {
		t.Errorf("owner references %+v, want the Node %s (uid-a)", o, node)
	}

	vf := n.PFs[1].VFs[3]
	if err := store.Save(&state.Record{Network: "ib-vf", ContainerID: "c1", IfName: "net1", PCI: vf.PCI,
		PodNamespace: "train", PodName: "nccl-1", PodUID: "u1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod on its VF", func() bool {
		o := api.Object(node)
		i := slices.IndexFunc(o.Spec.VFs, func(v v1alpha1.VF) bool { return v.PCI == vf.PCI })
		return i >= 0 && o.Spec.VFs[i].Pod != nil && o.Spec.VFs[i].Pod.Name == "nccl-1"
	})
	applies := api.SpecApplies.Load()
	if applies != 2 {
		t.Errorf("%d applies, want 2 (the first publish, the pod)", applies)
	}
	time.Sleep(300 * time.Millisecond)
	if got := api.SpecApplies.Load(); got != applies {
		t.Errorf("%d more applies with nothing changed", got-applies)
	}
}

// The controller's verdict on the node's VFs reaches the state directory:
// a VF whose GUID another node published first is mirrored as second,
// naming that node; the other node's GUID fixed, the verdict is empty
// again. Each change of the mirrored verdict is handed to OnVerdicts (the
// reporter's fabric taints).
func TestMirrorsTheVerdict(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	api := fabrictest.New(t, publish.FieldManager, controller.FieldManager)
	vf := n.PFs[0].VFs[0]
	api.Put(t, "gpu-b", v1alpha1.VF{PCI: "0000:18:00.2", NodeGUID: vf.NodeGUID, Since: metav1.NewTime(time.Now().Add(-time.Hour))})
	ctl := controller.New(controller.Config{Client: api})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{}, 2)
	go func() { ctl.Run(ctx); done <- struct{}{} }()
	go func() { ctl.Lead(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	var (
		mu     sync.Mutex
		handed []map[string][]state.FabricFinding
	)
	s, store := start(t, api, n.Root, func() (types.UID, bool) { return "uid-a", true }, func(vfs map[string][]state.FabricFinding) {
		mu.Lock()
		defer mu.Unlock()
		handed = append(handed, vfs)
	})
	verdict := func() []state.FabricFinding {
		v, err := store.LoadFabricVerdicts()
		if err != nil {
			return nil
		}
		return v.VFs[vf.PCI]
	}
	waitFor(t, "the VF's verdict mirrored", func() bool { return len(verdict()) > 0 })
	verdict0 := verdict()
	f := verdict0[0]
	if f.Kind != string(v1alpha1.DuplicateNodeGUID) || !f.Second || f.GUID != vf.NodeGUID || !slices.Contains(f.Others, "gpu-b/0000:18:00.2") {
		t.Errorf("verdict %+v, want DuplicateNodeGUID %s, second, gpu-b/0000:18:00.2 the other holder", f, vf.NodeGUID)
	}
	// The snapshot's count is set after the state file is written.
	waitFor(t, "the snapshot counting 1 VF with a verdict", func() bool { return s.Snapshot().Verdicts == 1 })

	api.Put(t, "gpu-b", v1alpha1.VF{PCI: "0000:18:00.2", NodeGUID: "a288:c2ff:fe99:0001", Since: metav1.NewTime(time.Now())})
	waitFor(t, "the verdict cleared", func() bool {
		v, err := store.LoadFabricVerdicts()
		return err == nil && len(v.VFs) == 0
	})
	// OnVerdicts is called after the state file is written: wait for the
	// clearing to be handed too. The first mirror (no object yet: no
	// findings) may come before the finding; then the finding, then its
	// clearing.
	calls := func() []map[string][]state.FabricFinding {
		mu.Lock()
		defer mu.Unlock()
		h := slices.Clone(handed)
		if len(h) > 0 && len(h[0]) == 0 {
			h = h[1:]
		}
		return h
	}
	waitFor(t, "the clearing handed to OnVerdicts", func() bool {
		h := calls()
		return len(h) >= 2 && len(h[len(h)-1]) == 0
	})
	if h := calls(); len(h) != 2 || !reflect.DeepEqual(h[0][vf.PCI], verdict0) || len(h[1]) != 0 {
		t.Errorf("handed to OnVerdicts: %+v, want the finding %+v, then none", h, verdict0)
	}
}
