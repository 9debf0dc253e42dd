// Package lease elects one leader among the fabric controller's replicas
// through a coordination.k8s.io/v1 Lease: the record and the timing rules
// of client-go's leaderelection (a holder renews every retry period; it
// steps down when a renewal has not succeeded within the renew deadline;
// another replica takes over once the record has not changed for the
// lease duration, by its own clock, so clock skew between replicas does
// not matter). client-go's package is not used because it imports the
// generated clientset and every informer, which would add 12.4 MB to the
// agent's binary, on every node, for a Deployment's sake
// (docs/performance.md).
package lease

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
)

// Client is what an elector does to its Lease.
type Client interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// NewClient returns a client of the Leases of namespace: client-go's
// generic typed client over a scheme of coordination.k8s.io/v1 alone.
func NewClient(cfg *rest.Config, namespace string) (Client, error) {
	s := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(s); err != nil {
		return nil, err
	}
	rc, err := fabricclient.NewREST(cfg, coordinationv1.SchemeGroupVersion, s)
	if err != nil {
		return nil, fmt.Errorf("lease client: %w", err)
	}
	return gentype.NewClientWithList("leases", rc, runtime.NewParameterCodec(s), namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }), nil
}

// Config is one replica's part in the election.
type Config struct {
	Client   Client
	Name     string // the Lease's name
	Identity string // this replica's holder identity
	// Duration is how long the others wait, from the last change of the
	// record they saw, before taking over; RenewDeadline how long a
	// holder keeps leading without a successful renewal; RetryPeriod how
	// often it renews and the others try.
	Duration, RenewDeadline, RetryPeriod time.Duration
	Logger                               *slog.Logger
}

// Elector is one replica's campaign. Its state is its goroutine's.
type Elector struct {
	cfg Config
	log *slog.Logger
	// observed is the record as last read or written, and when (by this
	// replica's clock) it last changed.
	observed   coordinationv1.LeaseSpec
	observedAt time.Time
	held       *coordinationv1.Lease // the Lease as last written while holding it
}

// New checks cfg and returns an elector.
func New(cfg Config) (*Elector, error) {
	switch {
	case cfg.Client == nil || cfg.Name == "" || cfg.Identity == "":
		return nil, fmt.Errorf("lease: a client, a Lease name and an identity are required")
	case cfg.RetryPeriod <= 0 || cfg.RenewDeadline <= cfg.RetryPeriod || cfg.Duration <= cfg.RenewDeadline:
		return nil, fmt.Errorf("lease: want 0 < retry period (%s) < renew deadline (%s) < duration (%s)", cfg.RetryPeriod, cfg.RenewDeadline, cfg.Duration)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Elector{cfg: cfg, log: cfg.Logger}, nil
}

// Run campaigns until ctx ends. Each time it holds the Lease it calls lead
// with a context that ends when leadership is lost (no renewal within the
// renew deadline) or ctx ends, waits for lead to return, releases the
// Lease if it still holds it (so another replica takes over at once) and,
// unless ctx ended, campaigns again.
func (e *Elector) Run(ctx context.Context, lead func(context.Context)) {
	for {
		if !e.acquire(ctx) {
			return
		}
		e.log.Info("leading", "lease", e.cfg.Name, "identity", e.cfg.Identity)
		leadCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(leadCtx)
		}()
		e.renew(leadCtx)
		cancel()
		<-done
		e.release()
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("lost the lease; campaigning again", "lease", e.cfg.Name)
	}
}

// acquire tries every retry period (with jitter, so replicas do not
// collide) until it holds the Lease or ctx ends.
func (e *Elector) acquire(ctx context.Context) bool {
	for {
		if e.try(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(jitter(e.cfg.RetryPeriod)):
		}
	}
}

// renew renews every retry period until a renewal has not succeeded
// within the renew deadline, or ctx ends.
func (e *Elector) renew(ctx context.Context) {
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.cfg.RetryPeriod):
		}
		rctx, cancel := context.WithDeadline(ctx, last.Add(e.cfg.RenewDeadline))
		ok := e.try(rctx)
		cancel()
		switch {
		case ok:
			last = time.Now()
		case time.Since(last) >= e.cfg.RenewDeadline:
			return
		}
	}
}

// try acquires or renews the Lease once; it reports whether this replica
// holds it now. Every write carries the resource version read, so of two
// replicas racing for it one fails.
func (e *Elector) try(ctx context.Context) bool {
	now := time.Now()
	cur, err := e.cfg.Client.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name}, Spec: e.record(nil, now)}
		got, err := e.cfg.Client.Create(ctx, l, metav1.CreateOptions{})
		return e.wrote(got, err, now)
	}
	if err != nil {
		e.log.Debug("cannot read the lease", "lease", e.cfg.Name, "err", err)
		return false
	}
	if !reflect.DeepEqual(cur.Spec, e.observed) {
		e.observed, e.observedAt = *cur.Spec.DeepCopy(), now
	}
	holder := ""
	if cur.Spec.HolderIdentity != nil {
		holder = *cur.Spec.HolderIdentity
	}
	if holder != "" && holder != e.cfg.Identity && now.Before(e.observedAt.Add(e.durationOf(cur.Spec))) {
		return false // another holds it and renews
	}
	next := cur.DeepCopy()
	next.Spec = e.record(&cur.Spec, now)
	got, err := e.cfg.Client.Update(ctx, next, metav1.UpdateOptions{})
	return e.wrote(got, err, now)
}

// record is the Lease's spec with this replica holding it, renewed now.
func (e *Elector) record(prev *coordinationv1.LeaseSpec, now time.Time) coordinationv1.LeaseSpec {
	id, secs, t := e.cfg.Identity, int32(e.cfg.Duration/time.Second), metav1.NewMicroTime(now)
	if secs < 1 {
		secs = 1
	}
	spec := coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t}
	if prev != nil {
		transitions := int32(0)
		if prev.LeaseTransitions != nil {
			transitions = *prev.LeaseTransitions
		}
		if prev.HolderIdentity != nil && *prev.HolderIdentity == id && prev.AcquireTime != nil {
			spec.AcquireTime = prev.AcquireTime
		} else {
			transitions++
		}
		spec.LeaseTransitions = &transitions
	}
	return spec
}

func (e *Elector) wrote(l *coordinationv1.Lease, err error, now time.Time) bool {
	if err != nil {
		e.log.Debug("cannot take or renew the lease", "lease", e.cfg.Name, "err", err)
		return false
	}
	e.held, e.observed, e.observedAt = l, *l.Spec.DeepCopy(), now
	return true
}

// durationOf is the holder's lease duration, or this replica's when the
// record has none.
func (e *Elector) durationOf(s coordinationv1.LeaseSpec) time.Duration {
	if s.LeaseDurationSeconds != nil && *s.LeaseDurationSeconds > 0 {
		return time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	return e.cfg.Duration
}

// release gives the Lease up, as client-go's ReleaseOnCancel does: no
// holder, a duration of one second. It is bounded by a retry period; a
// replica that cannot write lets the Lease expire instead.
func (e *Elector) release() {
	if e.held == nil || e.held.Spec.HolderIdentity == nil || *e.held.Spec.HolderIdentity != e.cfg.Identity {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	next := e.held.DeepCopy()
	none, one, t := "", int32(1), metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity, next.Spec.LeaseDurationSeconds, next.Spec.RenewTime = &none, &one, &t
	if _, err := e.cfg.Client.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		e.log.Warn("cannot release the lease; the others take over when it expires", "lease", e.cfg.Name, "err", err)
	}
	e.held = nil
}

// jitter spreads a period by up to a fifth, as client-go's does.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
