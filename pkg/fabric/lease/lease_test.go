package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// store holds one Lease as the API server does for these calls: a write
// whose resource version is not the stored one is a conflict.
type store struct {
	mu    sync.Mutex
	lease *coordinationv1.Lease
	rv    int
}

var leases = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// client is one replica's connection to the store; down cuts it off.
type client struct {
	s    *store
	down atomic.Bool
}

var errDown = errors.New("connection refused")

func (c *client) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	if c.down.Load() {
		return nil, errDown
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.lease == nil {
		return nil, apierrors.NewNotFound(leases, name)
	}
	return c.s.lease.DeepCopy(), nil
}

func (c *client) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if c.down.Load() {
		return nil, errDown
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.lease != nil {
		return nil, apierrors.NewAlreadyExists(leases, l.Name)
	}
	return c.s.put(l), nil
}

func (c *client) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if c.down.Load() {
		return nil, errDown
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.lease == nil || l.ResourceVersion != c.s.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leases, l.Name, errors.New("the object has been modified"))
	}
	return c.s.put(l), nil
}

func (s *store) put(l *coordinationv1.Lease) *coordinationv1.Lease {
	s.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(s.rv)
	s.lease = l
	return l.DeepCopy()
}

// replica is one elector running, and whether it leads.
type replica struct {
	c       *client
	leading atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// campaign starts n replicas over one store; leaders counts how many lead
// at once, and max is the most that ever did.
func campaign(t *testing.T, s *store, n int, duration time.Duration) ([]*replica, *atomic.Int32) {
	var leaders, maxLeaders atomic.Int32
	var rs []*replica
	for i := range n {
		r := &replica{c: &client{s: s}, done: make(chan struct{})}
		e, err := New(Config{Client: r.c, Name: "sriov-stable-fabric", Identity: fmt.Sprintf("replica-%d", i),
			Duration: duration, RenewDeadline: duration * 2 / 3, RetryPeriod: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		r.cancel = cancel
		go func() {
			defer close(r.done)
			e.Run(ctx, func(ctx context.Context) {
				if now := leaders.Add(1); now > maxLeaders.Load() {
					maxLeaders.Store(now)
				}
				r.leading.Store(true)
				<-ctx.Done()
				r.leading.Store(false)
				leaders.Add(-1)
			})
		}()
		rs = append(rs, r)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			r.cancel()
			<-r.done
		}
		if m := maxLeaders.Load(); m > 1 {
			t.Errorf("%d replicas led at once", m)
		}
	})
	return rs, &leaders
}

func leader(rs []*replica) *replica {
	for _, r := range rs {
		if r.leading.Load() {
			return r
		}
	}
	return nil
}

func waitLeader(t *testing.T, rs []*replica, not *replica, within time.Duration) (*replica, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		if l := leader(rs); l != nil && l != not {
			return l, time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("no new leader within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Of three replicas one leads; stopped, it releases the Lease and another
// leads within a couple of retry periods, not a lease duration; never two
// at once.
func TestHandOverOnStop(t *testing.T) {
	s := &store{}
	rs, _ := campaign(t, s, 3, 2*time.Second)
	first, _ := waitLeader(t, rs, nil, 2*time.Second)
	time.Sleep(500 * time.Millisecond) // renewals go on; nobody else takes it
	if l := leader(rs); l != first {
		t.Fatal("the leader changed while renewing")
	}
	first.cancel()
	<-first.done
	next, took := waitLeader(t, rs, first, time.Second)
	t.Logf("handed over in %s", took.Round(time.Millisecond))
	s.mu.Lock()
	h, tr := *s.lease.Spec.HolderIdentity, *s.lease.Spec.LeaseTransitions
	s.mu.Unlock()
	if next == first || h == "" || tr != 1 {
		t.Errorf("after the hand-over: holder %q, %d lease transitions; want the new leader, 1", h, tr)
	}
}

// A leader cut off from the API server stops leading within its renew
// deadline, before anyone else can take over, and another replica leads
// once the record has stood still for the lease duration.
func TestLeaderCutOff(t *testing.T) {
	s := &store{}
	const duration = 2 * time.Second
	rs, _ := campaign(t, s, 2, duration)
	first, _ := waitLeader(t, rs, nil, 2*time.Second)
	cut := time.Now()
	first.c.down.Store(true)
	for first.leading.Load() {
		if time.Since(cut) > duration {
			t.Fatalf("the cut-off leader still leads after %s (renew deadline %s)", duration, duration*2/3)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stepped := time.Since(cut)
	next, _ := waitLeader(t, rs, first, 2*duration)
	took := time.Since(cut)
	t.Logf("cut-off leader stepped down after %s; another led after %s", stepped.Round(time.Millisecond), took.Round(time.Millisecond))
	if next == first || took < duration-200*time.Millisecond {
		t.Errorf("taken over after %s, before the lease duration %s", took, duration)
	}
}

// New refuses timings under which two could lead at once.
func TestNewRefusesTimings(t *testing.T) {
	c := &client{s: &store{}}
	for _, cfg := range []Config{
		{Client: c, Name: "l", Identity: "a", Duration: time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond},
		{Client: c, Name: "l", Identity: "a", Duration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 500 * time.Millisecond},
		{Client: c, Name: "l", Duration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}
