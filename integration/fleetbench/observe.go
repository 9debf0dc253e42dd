package main

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabricclient"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// observer watches what an operator would look at: every NodeVFSet (the
// status the controller writes) and every Event, each stamped with the
// time this process saw it (a watch's delay counts against the
// controller, never for it).
type observer struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	sets    map[string]*v1alpha1.NodeVFSet
	// statusWrites counts the status changes seen per node; specWrites
	// the spec changes (the fleet's own publishing).
	statusWrites map[string]int
	specWrites   int
	events       []seenEvent
}

type seenEvent struct {
	at     time.Time
	kind   string // the involved object's
	name   string
	reason string
}

func newObserver() *observer {
	return &observer{changed: make(chan struct{}), sets: map[string]*v1alpha1.NodeVFSet{}, statusWrites: map[string]int{}}
}

// notify wakes the waiters; o.mu is held.
func (o *observer) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// run starts both informers and waits for their first lists.
func (o *observer) run(ctx context.Context, fc fabricclient.Client, kube kubernetes.Interface) error {
	sets := fabricclient.NewInformer(fc, "")
	_, _ = sets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.set(nil, obj.(*v1alpha1.NodeVFSet)) },
		UpdateFunc: func(old, obj any) { o.set(old.(*v1alpha1.NodeVFSet), obj.(*v1alpha1.NodeVFSet)) },
	})
	events := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "events", metav1.NamespaceAll, fields.Everything()),
		&corev1.Event{}, 0, cache.Indexers{})
	_, _ = events.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.event(obj.(*corev1.Event)) },
		UpdateFunc: func(_, obj any) { o.event(obj.(*corev1.Event)) },
	})
	go sets.RunWithContext(ctx)
	go events.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), sets.HasSynced, events.HasSynced) {
		return fmt.Errorf("the observer's informers did not sync")
	}
	return nil
}

func (o *observer) set(old, s *v1alpha1.NodeVFSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sets[s.Name] = s
	if old != nil && !reflect.DeepEqual(old.Status, s.Status) {
		o.statusWrites[s.Name]++
	}
	if old != nil && old.Generation != s.Generation {
		o.specWrites++
	}
	o.notify()
}

func (o *observer) event(e *corev1.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, seenEvent{at: time.Now(), kind: e.InvolvedObject.Kind, name: e.InvolvedObject.Name, reason: e.Reason})
	o.notify()
}

// waitFor waits until pred (called with o.mu held) holds and returns when
// it first saw it hold; false after timeout.
func (o *observer) waitFor(timeout time.Duration, pred func() bool) (time.Time, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		ok, ch := pred(), o.changed
		o.mu.Unlock()
		if ok {
			return time.Now(), true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// hasFinding: node's status names a finding of kind on pci, about its
// current spec. o.mu is held.
func (o *observer) hasFinding(node, pci string, kind v1alpha1.FindingKind) bool {
	s := o.sets[node]
	if s == nil || s.Status.ObservedGeneration != s.Generation {
		return false
	}
	for _, f := range s.Status.Findings {
		if f.PCI == pci && f.Kind == kind {
			return true
		}
	}
	return false
}

// clean: node's status is about its current spec and has no error
// finding. o.mu is held.
func (o *observer) clean(node string) bool {
	s := o.sets[node]
	if s == nil || s.Status.ObservedGeneration != s.Generation {
		return false
	}
	for _, f := range s.Status.Findings {
		if f.Severity == v1alpha1.SeverityError {
			return false
		}
	}
	return true
}

// eventSince: an Event of reason about node seen after t. o.mu is held.
func (o *observer) eventSince(t time.Time, node, reason string) bool {
	for i := len(o.events) - 1; i >= 0 && !o.events[i].at.Before(t); i-- {
		e := o.events[i]
		if e.kind == "Node" && e.name == node && e.reason == reason {
			return true
		}
	}
	return false
}

// allClean: every one of names is clean. o.mu is held.
func (o *observer) allClean(names []string) bool {
	for _, n := range names {
		if !o.clean(n) {
			return false
		}
	}
	return true
}

// counts are the writes seen so far: statuses, specs, Events.
type counts struct{ statuses, specs, events int }

func (o *observer) counts() counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := counts{specs: o.specWrites, events: len(o.events)}
	for _, n := range o.statusWrites {
		c.statuses += n
	}
	return c
}

// statusWritesOf returns each node's status changes seen so far.
func (o *observer) statusWritesOf() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.statusWrites)
}

// findings counts every finding of every status.
func (o *observer) findings() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.sets {
		n += len(s.Status.Findings)
	}
	return n
}
