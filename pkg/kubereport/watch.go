package kubereport

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Watching. Each informer lists once, then watches (client-go's reflector:
// one long-running WATCH, renewed every 5 to 10 minutes, and a new LIST
// only when the watch falls too far behind). No resync: a sync runs when a
// report comes or a watched object changes, never on a timer.

// watch starts an informer on lw whose every add, update and delete queues
// key; it runs until ctx ends and Stop waits for it.
func (r *Reporter) watch(ctx context.Context, lw cache.ListerWatcher, example runtime.Object, key string) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{})
	queue := func(any) { r.queue.Add(key) }
	// Registering a handler on an informer not yet started cannot fail.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: queue, DeleteFunc: queue,
		UpdateFunc: func(_, obj any) { queue(obj) },
	})
	r.informers.Go(func() { inf.RunWithContext(ctx) })
	return inf
}

// nodeListWatch watches one node, by name.
//
// Equivalent to: kubectl get node $NODE --watch
func nodeListWatch(c Client, node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	return listWatch(c.Nodes(), func(o *metav1.ListOptions) { o.FieldSelector = sel }, c)
}

// sliceListWatch watches the ResourceSlices of one node.
//
// Equivalent to: kubectl get resourceslices --field-selector spec.nodeName=$NODE --watch
func sliceListWatch(c Client, node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	return listWatch(c.ResourceSlices(), func(o *metav1.ListOptions) { o.FieldSelector = sel }, c)
}

// listWatch lists and watches what lw serves with the options selector
// sets, streaming the list where the client can (client: whether it
// says it cannot, as the fake clientset does).
func listWatch[L any](lw ListWatchClient[L], selector func(*metav1.ListOptions), client any) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			selector(&o)
			l, err := lw.List(ctx, o)
			if err != nil {
				return nil, err
			}
			return any(l).(runtime.Object), nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			selector(&o)
			return lw.Watch(ctx, o)
		},
	}, client)
}

// cachedNode is the node as the watch last saw it; nil before it listed or
// while the node does not exist.
func (r *Reporter) cachedNode() *corev1.Node {
	obj, ok, err := r.nodes.GetStore().GetByKey(r.cfg.NodeName)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.Node)
}

// nodeUID is the node's UID once the watch has seen it, "" before.
// NodeUID is the node's UID as its watch last saw it; false until the
// watch has listed it.
func (r *Reporter) NodeUID() (types.UID, bool) {
	uid := r.nodeUID()
	return types.UID(uid), uid != ""
}

func (r *Reporter) nodeUID() string {
	if n := r.cachedNode(); n != nil {
		return string(n.UID)
	}
	return ""
}

// cacheLag bounds how long the worker waits for a watch to show its own
// write.
const cacheLag = 2 * time.Second

// seeWrite waits until the watch shows what the worker just wrote (seen
// holds), so the next sync compares against it and does not write it
// again. A watch slower than cacheLag only costs that next sync a redundant
// write, which the API server answers as already done.
func seeWrite(ctx context.Context, seen func() bool) {
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, cacheLag, true,
		func(context.Context) (bool, error) { return seen(), nil })
}
