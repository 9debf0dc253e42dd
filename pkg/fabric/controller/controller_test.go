package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/fabrictest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

func newTracked(t *testing.T) *fabrictest.Tracker {
	return fabrictest.New(t, "sriov-stable-agent", FieldManager)
}

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func vf(pci, guid string, at time.Duration, pod string) v1alpha1.VF {
	v := v1alpha1.VF{PCI: pci, PF: "0000:18:00.0", NodeGUID: guid, PortGUIDs: []string{guid}, LinkLayer: "InfiniBand",
		Since: metav1.NewTime(t0.Add(at))}
	if pod != "" {
		v.Pod = &v1alpha1.PodRef{Namespace: "train", Name: pod, UID: "uid-" + pod}
	}
	return v
}

// run starts a replica over c; lead says whether it leads from the start.
func run(t *testing.T, c *fabrictest.Tracker, rec record.EventRecorder, lead bool) (*Controller, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	ctl := New(Config{Client: c, Recorder: rec, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	done := make(chan struct{}, 2)
	go func() { ctl.Run(ctx); done <- struct{}{} }()
	if lead {
		go func() { ctl.Lead(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		<-done
		if lead {
			<-done
		}
	})
	return ctl, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

func kinds(st v1alpha1.NodeVFSetStatus) string {
	var out []string
	for _, f := range st.Findings {
		k := string(f.Kind)
		if f.Second {
			k += "(second)"
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}

func drain(ch <-chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Two nodes given one GUID: both statuses say so (the later publisher
// second), with one Warning Event on each node and on the pod holding the
// VF; the GUID fixed, both clear with a Normal Event each; then nothing
// more is written.
func TestDuplicateFoundAndCleared(t *testing.T) {
	c := newTracked(t)
	const g = "a288:c2ff:fe18:0001"
	c.Put(t, "gpu-a", vf("0000:18:00.2", g, 0, "nccl-0"))
	c.Put(t, "gpu-b", vf("0000:18:00.2", g, time.Minute, ""))
	rec := record.NewFakeRecorder(100)
	ctl, _ := run(t, c, rec, true)
	want := map[string]string{"gpu-a": "DuplicateNodeGUID DuplicatePortGUID", "gpu-b": "DuplicateNodeGUID(second) DuplicatePortGUID(second)"}
	waitFor(t, "both statuses naming the duplicate", func() bool {
		return kinds(c.Status(t, "gpu-a")) == want["gpu-a"] && kinds(c.Status(t, "gpu-b")) == want["gpu-b"]
	})
	if st := c.Status(t, "gpu-b"); st.ObservedGeneration != 1 || st.Findings[0].Others[0].Node != "gpu-a" || st.Findings[0].Others[0].Pod.Name != "nccl-0" {
		t.Errorf("gpu-b's status %+v: want generation 1 and gpu-a's VF (pod nccl-0) as the other holder", st)
	}
	waitFor(t, "three warnings", func() bool { return len(rec.Events) >= 3 })
	events := drain(rec.Events)
	if len(events) != 3 || countPrefix(events, "Warning "+ReasonGUIDConflict) != 3 || !strings.Contains(strings.Join(events, "\n"), "pod train/nccl-0") {
		t.Errorf("events %q, want 3 warnings: both nodes and pod train/nccl-0", events)
	}

	c.Put(t, "gpu-b", vf("0000:18:00.2", "a288:c2ff:fe18:0099", time.Hour, ""))
	waitFor(t, "both statuses clear", func() bool {
		return len(c.Status(t, "gpu-a").Findings) == 0 && len(c.Status(t, "gpu-b").Findings) == 0 && c.Status(t, "gpu-b").ObservedGeneration == 2
	})
	waitFor(t, "three cleared events", func() bool { return len(rec.Events) >= 3 })
	if events := drain(rec.Events); countPrefix(events, "Normal "+ReasonGUIDCleared) != 3 {
		t.Errorf("events %q, want 3 cleared", events)
	}
	writes := ctl.Writes()
	time.Sleep(300 * time.Millisecond)
	if ctl.Writes() != writes || len(rec.Events) != 0 {
		t.Errorf("idle: %d more writes, %d more events; want none", ctl.Writes()-writes, len(rec.Events))
	}
	if st := ctl.Stats(); st.Nodes != 2 || st.VFs != 2 || st.Duplicates[v1alpha1.DuplicateNodeGUID] != 0 {
		t.Errorf("stats %+v, want 2 nodes, 2 VFs, no duplicates", st)
	}
}

// A replica that did not lead has its ledger built; taking over after the
// leader wrote every status, it writes none and emits nothing: no finding
// flaps with a change of leader.
func TestTakeoverWritesNothing(t *testing.T) {
	c := newTracked(t)
	for i := range 20 {
		c.Put(t, fmt.Sprintf("gpu-%02d", i), vf("0000:18:00.2", fmt.Sprintf("a288:c2ff:fe18:%04x", i%10), time.Duration(i)*time.Second, ""))
	}
	first, stop := run(t, c, nil, true)
	waitFor(t, "every status written", func() bool {
		for i := range 20 {
			if len(c.Status(t, fmt.Sprintf("gpu-%02d", i)).Findings) != 2 {
				return false
			}
		}
		return true
	})
	if first.Writes() != 20 {
		t.Errorf("the first leader wrote %d statuses, want 20 (one per node)", first.Writes())
	}
	rec := record.NewFakeRecorder(100)
	standby, _ := run(t, c, rec, false)
	waitFor(t, "the standby's informer synced", standby.Synced)
	stop()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { standby.Lead(ctx); close(done) }()
	waitFor(t, "the standby leading", standby.Leading)
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	if standby.Writes() != 0 || len(rec.Events) != 0 {
		t.Errorf("after the takeover: %d writes, %d events; want none", standby.Writes(), len(rec.Events))
	}
	if got := c.StatusApplies.Load(); got != 20 {
		t.Errorf("%d status applies in all, want 20", got)
	}
}

func countPrefix(events []string, prefix string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}
