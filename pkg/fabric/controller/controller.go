// Package controller is the fabric controller: it watches every node's
// NodeVFSet through an informer, keeps the ledger (package ledger) of
// their GUIDs, and while it leads writes each node's findings into its
// object's status and tells the node and the pods holding its VFs by
// Events. A replica that does not lead keeps its informer and ledger warm,
// so that on taking over it writes only what the last leader left wrong.
package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/ledger"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// FieldManager is the controller's name in a NodeVFSet's managed fields:
// it owns status; the node's agent owns spec.
const FieldManager = "sriov-stable-fabric"

// Reasons of the Events the controller emits.
const (
	ReasonGUIDConflict = "FabricGUIDConflict" // a node's or pod's VFs have error findings
	ReasonGUIDCleared  = "FabricGUIDCleared"  // they no longer have any
)

// Client is what the controller needs of the API: fabricclient.Client.
type Client interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeVFSetList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.NodeVFSet, error)
}

// Config says whom to watch and tell.
type Config struct {
	Client Client
	// Recorder emits the Events (nil: none).
	Recorder record.EventRecorder
	Logger   *slog.Logger
	// Workers write statuses in parallel; zero means 4.
	Workers int
}

// Controller is one replica.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex // guards ledger, gens and wrote
	ledger *ledger.Ledger
	gens   map[string]int64 // each node's spec generation as indexed
	// wrote is each node's status as this replica last wrote it, and the
	// resource version it wrote over: the informer's copy lags a write,
	// and a status must not be written (nor its Events emitted) twice.
	wrote map[string]written

	leading atomic.Bool
	writes  atomic.Int64
}

type written struct {
	status v1alpha1.NodeVFSetStatus
	over   string // the object's resource version when it was written
}

// New returns a controller; nothing runs until Run.
func New(cfg Config) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, ledger: ledger.New(), gens: map[string]int64{},
		wrote: map[string]written{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodevfsets"}),
	}
	c.informer = fabricclient.NewInformer(cfg.Client, "")
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: c.forget,
	})
	return c
}

// Run watches until ctx ends; it writes nothing until Lead. It returns
// once the informer has stopped.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	c.informer.RunWithContext(ctx)
}

// Synced reports whether the informer has listed every object once.
func (c *Controller) Synced() bool { return c.informer.HasSynced() }

// Lead writes statuses until ctx ends (leader election's
// OnStartedLeading): it waits for the informer's first list, queues every
// node (the last leader may have left some unwritten) and runs the
// workers.
func (c *Controller) Lead(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return
	}
	c.leading.Store(true)
	defer c.leading.Store(false)
	for _, key := range c.informer.GetStore().ListKeys() {
		c.queue.Add(key)
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.work(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDownWithDrain()
	wg.Wait()
}

// Leading reports whether this replica writes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// Writes counts the status writes made.
func (c *Controller) Writes() int64 { return c.writes.Load() }

// Stats is the ledger's counts now.
func (c *Controller) Stats() ledger.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ledger.Stats()
}

// Findings are the findings of node now (what its status will say).
func (c *Controller) Findings(node string) []v1alpha1.Finding {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ledger.Findings(node)
}

// observe indexes a NodeVFSet whose spec changed and queues the nodes it
// affects; a change of status alone queues the node itself (someone may
// have written over the controller's status).
func (c *Controller) observe(obj any) {
	s, ok := obj.(*v1alpha1.NodeVFSet)
	if !ok {
		return
	}
	c.mu.Lock()
	affected := []string{s.Name}
	if gen, seen := c.gens[s.Name]; !seen || gen != s.Generation {
		c.gens[s.Name] = s.Generation
		affected = c.ledger.Set(s.Name, s.Spec.VFs)
	}
	c.mu.Unlock()
	for _, n := range affected {
		c.queue.Add(n)
	}
}

func (c *Controller) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*v1alpha1.NodeVFSet)
	if !ok {
		return
	}
	c.mu.Lock()
	delete(c.gens, s.Name)
	delete(c.wrote, s.Name)
	affected := c.ledger.Delete(s.Name)
	c.mu.Unlock()
	for _, n := range affected {
		if n != s.Name {
			c.queue.Add(n)
		}
	}
}

func (c *Controller) work(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		c.log.Warn("cannot write the fabric findings of a node; retrying", "node", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync writes node's status when it differs from its findings, and emits
// the Events of what appeared or cleared.
func (c *Controller) sync(ctx context.Context, node string) error {
	obj, exists, err := c.informer.GetStore().GetByKey(node)
	if err != nil || !exists {
		return err
	}
	cur := obj.(*v1alpha1.NodeVFSet)
	c.mu.Lock()
	want := v1alpha1.NodeVFSetStatus{ObservedGeneration: c.gens[node], Findings: c.ledger.Findings(node)}
	last, ok := c.wrote[node]
	if sameStatus(cur.Status, want) {
		c.wrote[node] = written{status: want, over: cur.ResourceVersion}
	}
	c.mu.Unlock()
	switch {
	case sameStatus(cur.Status, want):
		return nil // the server has it
	case ok && sameStatus(last.status, want) && last.over == cur.ResourceVersion:
		return nil // written; the informer has not seen it yet
	}
	before := cur.Status
	if ok {
		before = last.status
	}
	if err := c.writeStatus(ctx, node, want); err != nil {
		return err
	}
	c.mu.Lock()
	c.wrote[node] = written{status: want, over: cur.ResourceVersion}
	c.mu.Unlock()
	c.emit(cur, before.Findings, want.Findings)
	return nil
}

func sameStatus(a, b v1alpha1.NodeVFSetStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Findings) != len(b.Findings) {
		return false
	}
	return len(a.Findings) == 0 || reflect.DeepEqual(a.Findings, b.Findings)
}

func (c *Controller) writeStatus(ctx context.Context, node string, st v1alpha1.NodeVFSetStatus) error {
	// No findings: the apply names none, and the server drops those the
	// controller applied before (it is status's only field manager).
	data, err := json.Marshal(struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status v1alpha1.NodeVFSetStatus `json:"status"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		Metadata: struct {
			Name string `json:"name"`
		}{node}, Status: st})
	if err != nil {
		return err
	}
	force := true
	c.writes.Add(1)
	_, err = c.cfg.Client.Patch(ctx, node, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply the status of NodeVFSet %s (%d findings): %w", node, len(st.Findings), err)
	}
	return nil
}

// emit tells the node, and each pod holding one of its VFs, when its error
// findings appear, change or clear: one Event per object per change, not
// one per finding (a cluster set up by one GUID list has 64 duplicates a
// node).
func (c *Controller) emit(s *v1alpha1.NodeVFSet, before, after []v1alpha1.Finding) {
	if c.cfg.Recorder == nil {
		return
	}
	pods := map[string]*v1alpha1.PodRef{}
	for _, v := range s.Spec.VFs {
		if v.Pod != nil {
			pods[v.PCI] = v.Pod
		}
	}
	nodeRef := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: s.Name}
	for _, o := range s.OwnerReferences {
		if o.Kind == "Node" && o.Name == s.Name {
			nodeRef.UID = o.UID
		}
	}
	c.tell(nodeRef, "node "+s.Name, errorsOf(before, nil), errorsOf(after, nil))
	for pci, p := range pods {
		only := func(f v1alpha1.Finding) bool { return f.PCI == pci }
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
		c.tell(ref, "VF "+pci+" of pod "+p.Namespace+"/"+p.Name, errorsOf(before, only), errorsOf(after, only))
	}
}

func errorsOf(fs []v1alpha1.Finding, keep func(v1alpha1.Finding) bool) []v1alpha1.Finding {
	var out []v1alpha1.Finding
	for _, f := range fs {
		if f.Severity == v1alpha1.SeverityError && (keep == nil || keep(f)) {
			out = append(out, f)
		}
	}
	return out
}

func (c *Controller) tell(ref *corev1.ObjectReference, what string, before, after []v1alpha1.Finding) {
	if summary(before) == summary(after) {
		return
	}
	if len(after) == 0 {
		c.cfg.Recorder.Event(ref, corev1.EventTypeNormal, ReasonGUIDCleared, what+": no GUID conflicts on the fabric any more")
		return
	}
	c.cfg.Recorder.Event(ref, corev1.EventTypeWarning, ReasonGUIDConflict, clip(what+": "+summary(after)+"; first: "+after[0].Message))
}

// summary counts findings by kind and names the VFs: "2 DuplicateNodeGUID,
// 1 InvalidGUID on 0000:18:00.2, 0000:18:00.3".
func summary(fs []v1alpha1.Finding) string {
	if len(fs) == 0 {
		return ""
	}
	kinds := map[v1alpha1.FindingKind]int{}
	vfs := map[string]bool{}
	for _, f := range fs {
		kinds[f.Kind]++
		vfs[f.PCI] = true
	}
	var parts []string
	for _, k := range v1alpha1.Kinds {
		if n := kinds[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	names := slices.Sorted(maps.Keys(vfs))
	const shown = 4
	list := strings.Join(names[:min(len(names), shown)], ", ")
	if len(names) > shown {
		list += fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return strings.Join(parts, ", ") + " on " + list
}

func clip(s string) string {
	const max = 1024 // an Event's message is cut by the API server at 1 KiB
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max-3], "") + "..."
}
