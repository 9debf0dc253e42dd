// Package kubereport tells Kubernetes what the agent's drift monitor
// concludes: events on a pod whose VF drifted or was repaired, a node
// condition (and, opt-in, a NoSchedule taint) from the node doctor, and one
// DeviceTaintRule per unhealthy VF that a DRA driver publishes, so the
// scheduler allocates none of them. It is the agent's only Kubernetes
// client; the monitor reaches it through monitor.Notifier.
package kubereport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
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
	Client kubernetes.Interface
	// NodeName is the node the agent runs on (the downward API's
	// spec.nodeName).
	NodeName string
	// TaintOnError keeps TaintKey (NoSchedule) on the node while the doctor
	// reports an error; it needs patch on nodes.
	TaintOnError bool
	// SysfsRoot is where the doctor reads sysfs: a PF's port finding makes
	// each of its VFs unhealthy.
	SysfsRoot string
	Logger    *slog.Logger
}

// Reporter implements monitor.Notifier. Pod events are queued by client-go's
// event broadcaster; the node condition, the node taint and the device taint
// rules are written by one worker from the latest doctor report, retried
// with backoff when the API server is unreachable. No call blocks the
// monitor.
type Reporter struct {
	cfg         Config
	log         *slog.Logger
	sys         sysfs.Reader
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	queue       workqueue.TypedRateLimitingInterface[string]
	done        chan struct{}

	mu     sync.Mutex
	report *doctor.Report // the latest doctor report, nil before the first
	// errs remembers each key's last error, so a failure that repeats on
	// every retry is logged once.
	errs map[string]string

	// The worker's own state.
	nodeUID   string          // once read: events on the node, the rules' owner
	notServed map[string]bool // DRA resources the API server does not serve
}

// Work items of the worker.
const (
	keyNode    = "node"    // condition and taint
	keyDevices = "devices" // device taint rules
)

// Start validates cfg, starts recording events and the worker, and returns
// the reporter; Stop ends them.
func Start(ctx context.Context, cfg Config) (*Reporter, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes reporting: no client")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes reporting: the node name is empty (set --node-name or NODE_NAME from the downward API's spec.nodeName)")
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = "/sys"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{
		cfg:  cfg,
		log:  cfg.Logger,
		sys:  sysfs.Reader{Root: cfg.SysfsRoot},
		done: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "sriov-stable-kubereport"}),
		errs:      map[string]string{},
		notServed: map[string]bool{},
	}
	r.broadcaster = record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst, QPS: eventQPS,
	}))
	r.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	r.recorder = r.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: cfg.NodeName})
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	go r.work(ctx)
	r.log.Info("telling Kubernetes: pod events, node condition and device taints", "node", cfg.NodeName,
		"condition", string(ConditionType), "taintOnError", cfg.TaintOnError)
	return r, nil
}

// Stop drops what is still queued, waits for the worker's current write and
// stops the event broadcaster.
func (r *Reporter) Stop() {
	r.queue.ShutDown()
	<-r.done
	r.broadcaster.Shutdown()
}

// Doctor implements monitor.Notifier: the node condition, the node taint
// and the device taint rules follow each doctor run.
func (r *Reporter) Doctor(rep *doctor.Report) {
	r.mu.Lock()
	r.report = rep
	r.mu.Unlock()
	r.queue.Add(keyNode)
	r.queue.Add(keyDevices)
}

func (r *Reporter) latest() *doctor.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.report
}

func (r *Reporter) work(ctx context.Context) {
	defer close(r.done)
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		err := r.sync(ctx, key)
		switch {
		case ctx.Err() != nil: // stopping: the error says only that
		case err != nil:
			r.noteResult(key, err)
			r.queue.AddRateLimited(key)
		default:
			r.noteResult(key, nil)
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

func (r *Reporter) sync(ctx context.Context, key string) error {
	rep := r.latest()
	if rep == nil {
		return nil
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
