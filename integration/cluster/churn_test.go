//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churn runs pod create/delete cycles on a NAD from several workers at
// once, each cycle one pod: create, wait until it runs, check its net1 is
// the VF its network-status names, delete, wait until it is gone.
type churn struct {
	c       *cluster
	nad     string
	prefix  string
	workers int
	cycles  int // at least this many; more while during() runs

	started, done atomic.Int64
	rejected      atomic.Int64 // pods rejected at admission and replaced
	mu            sync.Mutex
	failures      []string
	took          []time.Duration
}

// run runs the cycles while during runs alongside (it gets the count of
// completed cycles); the workers stop once cycles are done and during has
// returned. It returns during's error.
func (ch *churn) run(ctx context.Context, during func(done func() int64) error) error {
	var duringDone atomic.Bool
	var duringErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		duringErr = during(ch.done.Load)
		duringDone.Store(true)
	})
	for w := range ch.workers {
		wg.Go(func() {
			for {
				n := ch.started.Add(1)
				if n > int64(ch.cycles) && duringDone.Load() {
					return
				}
				ch.cycle(ctx, fmt.Sprintf("%s-%d-%d", ch.prefix, w, n))
				ch.done.Add(1)
			}
		})
	}
	wg.Wait()
	return duringErr
}

func (ch *churn) fail(format string, a ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.failures = append(ch.failures, fmt.Sprintf(format, a...))
}

// cycle runs one cycle. A pod kubelet rejects at admission because the
// device plugin has not registered again yet after a kubelet restart
// (kubelet admits pods before plugins re-register) never reached the
// runtime: it is counted and replaced by a new pod, as its controller would.
func (ch *churn) cycle(ctx context.Context, name string) {
	for attempt := 0; ; attempt++ {
		pod := name
		if attempt > 0 {
			pod = fmt.Sprintf("%s-r%d", name, attempt)
		}
		if !ch.attempt(ctx, pod) || attempt == 3 {
			return
		}
		ch.rejected.Add(1)
	}
}

// attempt runs one pod through the cycle; it returns true when kubelet
// rejected the pod at admission for want of a registered device.
func (ch *churn) attempt(ctx context.Context, name string) (rejected bool) {
	c := ch.c
	start := time.Now()
	if _, err := c.createPod(ctx, podSpec(name, ch.nad, resourceVF)); err != nil {
		ch.fail("create %s: %v", name, err)
		return false
	}
	defer func() {
		if err := c.deletePods(ctx, 180*time.Second, name); err != nil {
			ch.fail("delete %s: %v", name, err)
		}
	}()
	p, err := c.waitRunning(ctx, name, 180*time.Second)
	if p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" &&
		strings.Contains(p.Status.Message, "unhealthy devices "+resourceVF) {
		return true
	}
	if err != nil {
		ch.fail("%v", err)
		return false
	}
	ch.mu.Lock()
	ch.took = append(ch.took, time.Since(start))
	ch.mu.Unlock()
	if err := c.checkOwnAttachment(p, ch.nad); err != nil {
		ch.fail("%v", err)
	}
	return false
}

// checkOwnAttachment is checkAttachment with the VF the pod's
// network-status names (in churn, asking kubelet for every pod would
// serialize the workers on its PodResources API).
func (c *cluster) checkOwnAttachment(p *corev1.Pod, nad string) error {
	st, err := networkStatus(p)
	if err != nil {
		return err
	}
	for _, s := range st {
		if s.Name == testNamespace+"/"+nad && s.DeviceInfo != nil && s.DeviceInfo.Pci != nil {
			return c.checkAttachment(p, nad, s.DeviceInfo.Pci.PciAddress)
		}
	}
	return fmt.Errorf("pod %s: no network-status with device-info for %s: %s", p.Name, nad, p.Annotations[networkStatusAnnotation])
}

// sandboxFailures counts the tests' namespace's warning events by reason
// since a time: FailedCreatePodSandBox is a failed ADD, FailedKillPod a
// failed DEL (kubelet retries both).
func (c *cluster) sandboxFailures(ctx context.Context, since time.Time) (map[string]int, []string) {
	counts := map[string]int{}
	var msgs []string
	list, err := c.client.CoreV1().Events(testNamespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return map[string]int{"cannot list events: " + err.Error(): 1}, nil
	}
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.Before(since) {
			continue
		}
		switch e.Reason {
		case "FailedCreatePodSandBox", "FailedKillPod":
			n := int(e.Count)
			if n == 0 {
				n = 1
			}
			counts[e.Reason] += n
			msgs = append(msgs, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
		}
	}
	return counts, msgs
}
