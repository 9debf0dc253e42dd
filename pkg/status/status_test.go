package status

import (
	"sync"
	"testing"
	"time"
)

// A job that returns in time is finished; one that outlives the wait is
// left running, keeps the job busy (RunBounded does not start it again)
// until it returns, and is then free at once.
func TestBusyRunBounded(t *testing.T) {
	var b Busy
	if started, finished := b.RunBounded(nil, time.Second, func() {}); !started || !finished {
		t.Fatalf("a quick job: started %v, finished %v", started, finished)
	}
	if _, running := b.Running(time.Now()); running {
		t.Fatal("busy after a finished job")
	}
	release := make(chan struct{})
	returned := make(chan struct{})
	if started, finished := b.RunBounded(nil, 20*time.Millisecond, func() { <-release; close(returned) }); !started || finished {
		t.Fatalf("a blocked job: started %v, finished %v; want true, false", started, finished)
	}
	if d, running := b.Running(time.Now().Add(time.Minute)); !running || d < time.Minute {
		t.Errorf("a blocked job: running %v for %s", running, d)
	}
	if started, _ := b.RunBounded(nil, time.Second, func() { t.Error("started beside a running job") }); started {
		t.Error("RunBounded started a job while one runs")
	}
	done := make(chan struct{})
	close(done)
	close(release)
	<-returned
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, running := b.Running(time.Now()); !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still busy 5 s after the job returned")
		}
		time.Sleep(time.Millisecond)
	}
	block := make(chan struct{})
	defer close(block)
	if started, finished := b.RunBounded(done, 0, func() { <-block }); !started || finished {
		t.Errorf("a job whose caller is done: started %v, finished %v; want true, false", started, finished)
	}
}

func TestCountsSnapshotIsACopy(t *testing.T) {
	var c Counts[string]
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Inc("a")
			}
		})
	}
	wg.Wait()
	s := c.Snapshot()
	c.Inc("a")
	if s["a"] != 800 || c.Snapshot()["a"] != 801 {
		t.Errorf("snapshot %d, now %d; want 800, 801", s["a"], c.Snapshot()["a"])
	}
	var r RepairCounts
	r.Made(RepairName)
	r.Refused(RepairHost, RefusedNotOwner)
	got := r.Snapshot()
	if got.Made[RepairName] != 1 || got.Refused[KindReason{RepairHost, RefusedNotOwner}] != 1 || len(got.Made)+len(got.Refused) != 2 {
		t.Errorf("repair counts %+v", got)
	}
}
