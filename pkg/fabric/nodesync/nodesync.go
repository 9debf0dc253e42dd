// Package nodesync is the node agent's side of the fabric ledger. It
// publishes the identities of the node's VFs into the node's NodeVFSet
// (package publish) whenever they may have changed: after a doctor run or
// a port change (it is a nodecheck.Notifier) and when an attachment record
// is written or removed (an inotify watch of the state directory); never
// on a timer. And it mirrors the fabric controller's verdict on the node's
// VFs, from the object's status, into the state directory, where the
// plugin reads it under guidPolicy require (state.FabricVerdicts): the
// CNI binary makes no API call.
package nodesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/publish"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Client is what the node side needs of the API: fabricclient.Client.
type Client interface {
	publish.Client
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeVFSetList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Config says whose VFs to publish, where to read them and where to mirror
// the verdicts.
type Config struct {
	Client Client
	Node   string
	// NodeUID is the Node object's UID (the NodeVFSet's owner), or false
	// while it is not known yet (the Kubernetes reporter's watch has not
	// listed the node): publishing waits for it.
	NodeUID func() (types.UID, bool)
	Sysfs   sysfs.Reader
	Store   *state.Store
	Logger  *slog.Logger
	// OnVerdicts, when set, gets the node's findings by VF each time the
	// mirrored verdict changes (the Kubernetes reporter's opt-in device
	// taints, kubereport.Reporter.Fabric). It must not block.
	OnVerdicts func(map[string][]state.FabricFinding)
}

// The work items, also the keys of Status.Err.
const (
	WorkPublish = "spec"     // read the identities and publish them
	WorkMirror  = "verdicts" // mirror the status into the state directory

	keySpec     = WorkPublish
	keyVerdicts = WorkMirror
)

// maxRetry bounds the backoff of a failed publish or mirror.
const maxRetry = time.Minute

// uidRetry is how soon a publish waiting for the node's UID tries again.
const uidRetry = 500 * time.Millisecond

// Syncer is the node's publisher and verdict mirror.
type Syncer struct {
	cfg Config
	log *slog.Logger
	// pub and pubUID are the worker's: the publisher for the Node object
	// of that UID. gone is set when the watch saw the NodeVFSet deleted.
	pub      *publish.Publisher
	pubUID   types.UID
	gone     atomic.Bool
	queue    workqueue.TypedRateLimitingInterface[string]
	informer cache.SharedIndexInformer

	mu     sync.Mutex
	status Status
	// mirrored is the verdict file's VFs as last written (nil: never).
	mirrored map[string][]state.FabricFinding
}

// Status is what the syncer last did, for metrics and tests.
type Status struct {
	// Published is when the spec was last written; Applies counts the
	// writes, Reads the readings of the identities.
	Published time.Time
	Applies   int
	Reads     int
	// VFs is how many VFs the last reading found.
	VFs int
	// Err is the last publish's or mirror's failure (by WorkPublish,
	// WorkMirror), cleared by a success of the same work.
	Err map[string]string
	// Verdicts is how many of the node's VFs have a finding in the
	// verdict file as last mirrored.
	Verdicts int
}

// New returns a syncer; nothing runs until Run.
func New(cfg Config) (*Syncer, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("fabric publishing: no API client")
	case cfg.Node == "":
		return nil, errors.New("fabric publishing: no node name")
	case cfg.NodeUID == nil:
		return nil, errors.New("fabric publishing: no source of the node's UID")
	case cfg.Store == nil:
		return nil, errors.New("fabric publishing: no state directory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{cfg: cfg, log: cfg.Logger, status: Status{Err: map[string]string{}},
		// Retries back off to a minute, not client-go's default 16: the
		// CRD installed after the agents (or the API server back) is
		// published within a minute.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, maxRetry),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "sriov-stable-fabric-node"}),
	}
	s.informer = fabricclient.NewInformer(cfg.Client, fields.OneTermEqualSelector("metadata.name", cfg.Node).String())
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.queue.Add(keyVerdicts) },
		UpdateFunc: func(any, any) { s.queue.Add(keyVerdicts) },
		DeleteFunc: func(any) {
			s.gone.Store(true)
			s.queue.Add(keyVerdicts)
			s.Trigger()
		},
	})
	return s, nil
}

// Doctor implements nodecheck.Notifier: a doctor run or a port change may
// have changed a VF's GUIDs, link layer or port state.
func (s *Syncer) Doctor(*doctor.Report) { s.Trigger() }

// Trigger asks for a reading and, when it differs, a publish. Triggers
// that come while one is queued are one.
func (s *Syncer) Trigger() { s.queue.Add(keySpec) }

// Snapshot returns what the syncer last did.
func (s *Syncer) Snapshot() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Err = maps.Clone(s.status.Err)
	return st
}

// Run publishes and mirrors until ctx ends: at once, then on each trigger,
// record change and change of the node's object. It returns once its
// goroutines have.
func (s *Syncer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.queue.ShutDown()
	wg.Go(func() { s.informer.RunWithContext(ctx) })
	if w, err := s.cfg.Store.WatchRecords(); err != nil {
		s.log.Warn("cannot watch the attachment records; a pod's VF is published at the next doctor run or port change", "err", err)
	} else {
		wg.Go(func() {
			<-ctx.Done()
			w.Close()
		})
		wg.Go(func() {
			for {
				if _, _, err := w.Next(); err != nil {
					return
				}
				w.Ensure()
				s.Trigger()
			}
		})
	}
	s.Trigger()
	wg.Go(func() {
		<-ctx.Done()
		s.queue.ShutDown()
	})
	for s.work(ctx) {
	}
}

func (s *Syncer) work(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	var err error
	switch key {
	case keySpec:
		err = s.publish(ctx)
	case keyVerdicts:
		err = s.mirror()
	}
	s.mu.Lock()
	prev := s.status.Err[key]
	if err == nil {
		delete(s.status.Err, key)
	} else {
		s.status.Err[key] = err.Error()
	}
	s.mu.Unlock()
	switch {
	case errors.Is(err, errNoUID):
		s.queue.Forget(key)
		s.queue.AddAfter(key, uidRetry)
	case err != nil && ctx.Err() == nil:
		if err.Error() != prev {
			s.log.Warn("fabric ledger: retrying with backoff", "work", key, "node", s.cfg.Node, "err", err)
		}
		s.queue.AddRateLimited(key)
	default:
		if prev != "" {
			s.log.Info("fabric ledger: working again", "work", key, "node", s.cfg.Node)
		}
		s.queue.Forget(key)
	}
	return true
}

var errNoUID = errors.New("the node's UID is not known yet")

// publish reads the node's VF identities and applies them when they
// changed. A VF that cannot be read is left out and named in the error
// (retried), and the rest are published.
func (s *Syncer) publish(ctx context.Context) error {
	uid, ok := s.cfg.NodeUID()
	if !ok {
		return errNoUID
	}
	if s.pub == nil || s.gone.Swap(false) || s.pubUID != uid {
		// A new Node object (deleted and created again under the same
		// name), or the NodeVFSet gone with the old one: read it anew.
		s.pub, s.pubUID = publish.New(s.cfg.Client, s.cfg.Node, uid), uid
	}
	prev, err := s.pub.Published(ctx)
	if err != nil {
		return err
	}
	recs, err := s.cfg.Store.List()
	if err != nil {
		s.log.Debug("fabric ledger: some attachment records cannot be read", "err", err)
	}
	vfs, readErr := publish.Identities(s.cfg.Sysfs, recs, prev, time.Now())
	wrote, err := s.pub.Publish(ctx, vfs)
	s.mu.Lock()
	s.status.Reads++
	s.status.VFs = len(vfs)
	if wrote && err == nil {
		s.status.Published, s.status.Applies = time.Now(), s.status.Applies+1
	}
	s.mu.Unlock()
	if wrote && err == nil {
		s.log.Info("fabric ledger: published the node's VF identities", "node", s.cfg.Node, "vfs", len(vfs))
	}
	return errors.Join(err, readErr)
}

// mirror writes the status's findings, by VF, into the verdict file when
// they differ from what it holds; no object (not published yet, or gone
// with its node) is no findings.
func (s *Syncer) mirror() error {
	vfs := map[string][]state.FabricFinding{}
	obj, exists, err := s.informer.GetStore().GetByKey(s.cfg.Node)
	if err != nil {
		return fmt.Errorf("read NodeVFSet %s from the watch: %w", s.cfg.Node, err)
	}
	if exists {
		for _, f := range obj.(*v1alpha1.NodeVFSet).Status.Findings {
			ff := state.FabricFinding{Kind: string(f.Kind), GUID: f.GUID, Second: f.Second, Message: f.Message}
			for _, o := range f.Others {
				ff.Others = append(ff.Others, o.Node+"/"+o.PCI)
			}
			vfs[f.PCI] = append(vfs[f.PCI], ff)
		}
	}
	s.mu.Lock()
	same := s.mirrored != nil && reflect.DeepEqual(s.mirrored, vfs)
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.cfg.Store.SaveFabricVerdicts(&state.FabricVerdicts{Node: s.cfg.Node, Mirrored: time.Now().UTC(), VFs: vfs}); err != nil {
		return err
	}
	s.mu.Lock()
	s.mirrored, s.status.Verdicts = vfs, len(vfs)
	s.mu.Unlock()
	s.log.Info("fabric ledger: mirrored the controller's verdict", "node", s.cfg.Node, "vfsWithFindings", len(vfs))
	if s.cfg.OnVerdicts != nil {
		s.cfg.OnVerdicts(vfs)
	}
	return nil
}
