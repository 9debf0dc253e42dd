// Package kubereport, an exporter of the agent, tells Kubernetes what its
// sources conclude: events on a pod whose VF drifted or was repaired, a node
// condition (and, opt-in, a NoSchedule taint) from the node doctor, and one
// DeviceTaintRule per unhealthy VF that a DRA driver publishes, so the
// scheduler allocates none of them. It is the agent's only Kubernetes
// client; the sources reach it through their Notifier interfaces.
package kubereport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// Domain is the project's domain: the node condition, taint keys and
// labels it writes are named in it, never in kubernetes.io.
const Domain = "sriov-stable-cni.io"

// Component is the event source and the field manager of every write.
const Component = "sriov-stable-agent"

// Event rate limits (client-go's EventCorrelator, per involved object and
// event type): a burst of eventBurst, then one event every 1/eventQPS
// seconds; a write that counts a repeat uses a token too. Identical events
// within ten minutes are one event with a count (deduplication), and more
// than ten similar ones become one "combined from similar events", written
// (the burst being ten too) once the next token comes. A port
// flapping every sweep therefore shows as two events whose counts grow,
// never as a storm (TestPodEventsRateLimited).
const (
	eventBurst = 10
	eventQPS   = 1.0 / 300
)

// Config says whom to tell about which node.
type Config struct {
	Client Client
	// NodeName is the node the agent runs on (the downward API's
	// spec.nodeName).
	NodeName string
	// TaintOnError keeps TaintKey (NoSchedule) on the node while the doctor
	// reports an error; it needs patch on nodes.
	TaintOnError bool
	// DeviceTaintEffect is the effect of the device taints: NoSchedule (the
	// default) keeps the scheduler from allocating the VF, None only marks
	// it (Kubernetes 1.35 and later).
	DeviceTaintEffect resourcev1.DeviceTaintEffect
	Logger            *slog.Logger
}

// Reporter is the notifier of the agent's sources (monitor.Notifier,
// nodecheck.Notifier, janitor.Notifier). Pod events are queued by
// client-go's event broadcaster; the node condition, the node taint and the device taint
// rules are written by one worker from the latest doctor report, retried
// with backoff when the API server is unreachable. What the API server
// holds of them the reporter learns by watching (informers on its node, the
// ResourceSlices of its node and its own DeviceTaintRules), so a report
// that changes nothing costs no request, and a change someone else makes
// (a rule deleted, a slice published) is put right at once. No call
// blocks the monitor.
type Reporter struct {
	cfg         Config
	log         *slog.Logger
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	queue       workqueue.TypedRateLimitingInterface[string]
	stop        context.CancelFunc
	started     time.Time
	done        chan struct{}
	informers   sync.WaitGroup

	mu     sync.Mutex
	report *doctor.Report // the latest doctor report, nil before the first
	// fabric are the VFs the fabric controller found second to a GUID
	// (Fabric), with their problem under finding.TaintFabricGUID.
	fabric map[string]problem
	gen    uint64 // how many reports (doctor's or fabric's) came
	synced map[string]uint64
	// errs remembers each key's last error, so a failure that repeats on
	// every retry is logged once.
	errs map[string]string

	// The worker's own state.
	nodes  cache.SharedIndexInformer // the node, by name
	dra    *draAPI                   // what is served, once discovered
	slices cache.SharedIndexInformer // the node's ResourceSlices, once discovered
	rules  cache.SharedIndexInformer // the agent's rules of the node, once discovered
	ruleAt ruleAPI
}

// Work items of the worker.
const (
	keyNode    = "node"    // condition and taint
	keyDevices = "devices" // device taint rules
)

// errCacheSyncing makes the worker look at a key again shortly: an
// informer it needs has not listed yet.
var errCacheSyncing = errors.New("the watch has not listed yet")

// cacheRetry is how soon a key whose informer is still listing is looked at
// again (in the agent's memory: no request); after listGrace the wait is
// worth a warning.
const (
	cacheRetry = 50 * time.Millisecond
	listGrace  = 3 * time.Second
)

// Start validates cfg, starts recording events, watching and the worker, and
// returns the reporter; Stop ends them.
func Start(ctx context.Context, cfg Config) (*Reporter, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes reporting: no client")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes reporting: the node name is empty (set --node-name or NODE_NAME from the downward API's spec.nodeName)")
	}
	switch cfg.DeviceTaintEffect {
	case "":
		cfg.DeviceTaintEffect = resourcev1.DeviceTaintEffectNoSchedule
	case resourcev1.DeviceTaintEffectNoSchedule, resourcev1.DeviceTaintEffectNone:
	default:
		return nil, fmt.Errorf("kubernetes reporting: device taint effect %q: want %s or %s (NoExecute would evict running pods; the agent never does)",
			cfg.DeviceTaintEffect, resourcev1.DeviceTaintEffectNoSchedule, resourcev1.DeviceTaintEffectNone)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(ctx)
	r := &Reporter{
		cfg:     cfg,
		log:     cfg.Logger,
		stop:    stop,
		started: time.Now(),
		done:    make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "sriov-stable-kubereport"}),
		synced: map[string]uint64{},
		errs:   map[string]string{},
	}
	var err error
	if r.recorder, r.broadcaster, err = NewEventRecorder(ctx, cfg.Client, corev1.EventSource{Component: Component, Host: cfg.NodeName}); err != nil {
		return nil, fmt.Errorf("kubernetes reporting: %w", err)
	}
	r.nodes = r.watch(ctx, nodeListWatch(cfg.Client, cfg.NodeName), &corev1.Node{}, keyNode)
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	go r.work(ctx)
	r.log.Info("telling Kubernetes: pod events, node condition and device taints", "node", cfg.NodeName,
		"condition", string(ConditionType), "taintOnError", cfg.TaintOnError, "deviceTaintEffect", string(cfg.DeviceTaintEffect))
	return r, nil
}

// NewEventRecorder is client-go's event recorder writing through c, with
// the reporter's spam limits (a burst of eventBurst per object, then one
// every 1/eventQPS s); the broadcaster's Shutdown stops it.
func NewEventRecorder(ctx context.Context, c Client, source corev1.EventSource) (record.EventRecorder, record.EventBroadcaster, error) {
	s, err := apiScheme()
	if err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst, QPS: eventQPS,
	}))
	b.StartRecordingToSink(eventSink{ctx: ctx, c: c})
	return b.NewRecorder(s, source), b, nil
}

// Stop drops what is still queued, waits for the worker's current write,
// stops watching and stops the event broadcaster.
func (r *Reporter) Stop() {
	r.queue.ShutDown()
	<-r.done
	r.stop()
	r.informers.Wait()
	r.broadcaster.Shutdown()
}

// Doctor implements nodecheck.Notifier: the node condition, the node taint
// and the device taint rules follow each doctor run.
func (r *Reporter) Doctor(rep *doctor.Report) {
	r.mu.Lock()
	r.report = rep
	r.gen++
	r.mu.Unlock()
	r.queue.Add(keyNode)
	r.queue.Add(keyDevices)
}

// Fabric implements the opt-in device taint of the fabric ledger's
// verdicts (nodesync.Config.OnVerdicts): each VF of the node that came
// second to a GUID another VF of the cluster holds (a duplicate node or
// port GUID, a system image GUID shared with another NIC) gets a
// DeviceTaintRule under finding.TaintFabricGUID, so the scheduler stops
// handing it out; the first holder keeps its VF. Who is second is decided
// by when each GUID was first published, so it is the same after a
// restart of either side.
func (r *Reporter) Fabric(vfs map[string][]state.FabricFinding) {
	problems := fabricProblems(vfs)
	r.mu.Lock()
	same := maps.Equal(r.fabric, problems) && r.fabric != nil
	if !same {
		r.fabric = problems
		r.gen++
	}
	r.mu.Unlock()
	if !same {
		r.queue.Add(keyDevices)
	}
}

// fabricValues are the taint values of the findings that taint the second
// holder, by kind.
var fabricValues = map[v1alpha1.FindingKind]string{
	v1alpha1.DuplicateNodeGUID:  "duplicate-node-guid",
	v1alpha1.DuplicatePortGUID:  "duplicate-port-guid",
	v1alpha1.SharedSysImageGUID: "shared-sys-image-guid",
}

// fabricProblems keeps each VF's first finding (the controller's kind
// order) that made it the second holder.
func fabricProblems(vfs map[string][]state.FabricFinding) map[string]problem {
	out := map[string]problem{}
	for pci, fs := range vfs {
		for _, f := range fs {
			if v, ok := fabricValues[v1alpha1.FindingKind(f.Kind)]; ok && f.Second {
				out[pci] = problem{value: v, message: "fabric ledger: " + f.Message}
				break
			}
		}
	}
	return out
}

func (r *Reporter) latest() (*doctor.Report, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report, r.gen
}

// syncedReports is how many reports key's last sync had seen (tests wait
// on it).
func (r *Reporter) syncedReports(key string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced[key]
}

func (r *Reporter) work(ctx context.Context) {
	defer close(r.done)
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		rep, gen := r.latest()
		err := r.sync(ctx, key, rep)
		switch {
		case ctx.Err() != nil: // stopping: the error says only that
		case errors.Is(err, errCacheSyncing):
			if time.Since(r.started) > listGrace {
				r.noteResult(key, fmt.Errorf("the watch of node %s and its devices has not listed them within %s of the start (is the API server reachable?)",
					r.cfg.NodeName, listGrace))
			}
			r.queue.Forget(key)
			r.queue.AddAfter(key, cacheRetry)
		case err != nil:
			r.noteResult(key, err)
			r.queue.AddRateLimited(key)
		default:
			r.noteResult(key, nil)
			r.queue.Forget(key)
			r.mu.Lock()
			r.synced[key] = gen
			r.mu.Unlock()
		}
		r.queue.Done(key)
	}
}

func (r *Reporter) sync(ctx context.Context, key string, rep *doctor.Report) error {
	if rep == nil {
		return nil // nothing to say before the first doctor run
	}
	switch key {
	case keyNode:
		return r.syncNode(ctx, rep)
	case keyDevices:
		return r.syncDevices(ctx, rep)
	}
	return fmt.Errorf("unknown work item %q", key)
}

// noteResult logs a failure once per distinct error and its end once.
func (r *Reporter) noteResult(key string, err error) {
	r.mu.Lock()
	prev := r.errs[key]
	if err == nil {
		delete(r.errs, key)
	} else {
		r.errs[key] = err.Error()
	}
	r.mu.Unlock()
	what := map[string]string{keyNode: "node condition and taint", keyDevices: "device taint rules"}[key]
	switch {
	case err != nil && err.Error() != prev:
		r.log.Warn("cannot update "+what+"; retrying with backoff", "node", r.cfg.NodeName, "err", err)
	case err == nil && prev != "":
		r.log.Info(what+" updated again", "node", r.cfg.NodeName)
	}
}
