//go:build clustere2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/cluster/kubecluster"
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
// runtime: it is counted and, once kubelet is back with its devices,
// replaced by a new pod, as its controller would. A rejection no restart
// explains fails the cycle, and so does the replacement's rejection: a
// rejection that repeats is not a finished cycle.
func (ch *churn) cycle(ctx context.Context, name string) {
	created, why := ch.attempt(ctx, name)
	if why == "" {
		return
	}
	if !ch.c.kubeletRestart.explains(created) {
		ch.fail("pod %s rejected at admission with no kubelet restart to explain it: %s", name, why)
		return
	}
	ch.rejected.Add(1)
	if err := ch.c.kubeletRestart.waitBack(180 * time.Second); err != nil {
		ch.fail("pod %s rejected at admission (%s), and kubelet was not back to replace it: %v", name, why, err)
		return
	}
	if _, again := ch.attempt(ctx, name+"-r"); again != "" {
		ch.fail("pod %s, which replaced %s once kubelet was back with its devices, was rejected at admission too: %s", name+"-r", name, again)
	}
}

// attempt runs one pod through the cycle; it returns when the pod was
// created and, when kubelet rejected it at admission for want of a
// registered device, kubelet's message.
func (ch *churn) attempt(ctx context.Context, name string) (created time.Time, rejected string) {
	c := ch.c
	start := time.Now()
	if _, err := c.CreatePod(ctx, kubecluster.PodSpec(name, ch.nad, kubecluster.ResourceVF)); err != nil {
		ch.fail("create %s: %v", name, err)
		return start, ""
	}
	defer func() {
		if err := c.DeletePods(ctx, 180*time.Second, name); err != nil {
			ch.fail("delete %s: %v", name, err)
		}
	}()
	p, err := c.WaitRunning(ctx, name, 180*time.Second)
	if p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" &&
		strings.Contains(p.Status.Message, "unhealthy devices "+kubecluster.ResourceVF) {
		return start, p.Status.Message
	}
	if err != nil {
		ch.fail("%v", err)
		return start, ""
	}
	ch.mu.Lock()
	ch.took = append(ch.took, time.Since(start))
	ch.mu.Unlock()
	if err := c.checkOwnAttachment(p, ch.nad); err != nil {
		ch.fail("%v", err)
	}
	return start, ""
}

// restartWindow is when kubelet was last restarted and when it was back
// (healthy, a Ready heartbeat since, the device plugin registered again):
// the one time kubelet may admit a pod before its devices are there.
type restartWindow struct {
	mu          sync.Mutex
	began, back time.Time
}

func (w *restartWindow) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began, w.back = time.Now(), time.Time{}
}

func (w *restartWindow) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.back = time.Now()
}

// explains tells whether a pod created at created may have met the
// restarted kubelet before its device plugin registered again: created
// before kubelet was back, and at most a few seconds before the restart
// (a pod the old kubelet had not admitted yet).
func (w *restartWindow) explains(created time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.began.IsZero() && created.After(w.began.Add(-10*time.Second)) && (w.back.IsZero() || created.Before(w.back))
}

// waitBack waits until the last restart's kubelet is back.
func (w *restartWindow) waitBack(timeout time.Duration) error {
	return kubecluster.WaitFor(timeout, 250*time.Millisecond, "kubelet back after its restart", func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.back.IsZero(), nil
	})
}

// checkOwnAttachment is checkAttachment with the VF the pod's
// network-status names (in churn, asking kubelet for every pod would
// serialize the workers on its PodResources API).
func (c *cluster) checkOwnAttachment(p *corev1.Pod, nad string) error {
	st, err := kubecluster.NetworkStatus(p)
	if err != nil {
		return err
	}
	for _, s := range st {
		if s.Name == kubecluster.Namespace+"/"+nad && s.DeviceInfo != nil && s.DeviceInfo.Pci != nil {
			return c.checkAttachment(p, nad, s.DeviceInfo.Pci.PciAddress)
		}
	}
	return fmt.Errorf("pod %s: no network-status with device-info for %s: %s", p.Name, nad, p.Annotations[nadv1.NetworkStatusAnnot])
}

// ourFailure is in the message of every FailedCreatePodSandBox that our
// plugin caused: libcni names the failing plugin of a chain (`plugin
// type="sriov-stable-cni" failed (add): error 102: VF …`, our message
// starting with its code because Multus drops the code itself). Matched
// without the code, so that a failure with none (a crash) counts too.
const ourFailure = `plugin type="sriov-stable-cni"`

// sandboxFailures counts the tests' namespace's warning events by reason
// since a time: FailedCreatePodSandBox is a failed ADD, FailedKillPod a
// failed DEL (kubelet retries both). It returns the messages of all of
// them, and of the FailedCreatePodSandBox events our plugin caused
// (ourFailure) apart, each with its count; counts["ours"] counts those.
func (c *cluster) sandboxFailures(ctx context.Context, since time.Time) (counts map[string]int, msgs, ours []string) {
	counts = map[string]int{}
	list, err := c.Client.CoreV1().Events(kubecluster.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return map[string]int{"cannot list events: " + err.Error(): 1}, []string{err.Error()}, []string{"cannot list events: " + err.Error()}
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
			n := max(int(e.Count), 1)
			counts[e.Reason] += n
			msg := fmt.Sprintf("%s: %s (%d times): %s", e.InvolvedObject.Name, e.Reason, n, e.Message)
			msgs = append(msgs, msg)
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, ourFailure) {
				counts["ours"] += n
				ours = append(ours, msg)
			}
		}
	}
	return counts, msgs, ours
}
