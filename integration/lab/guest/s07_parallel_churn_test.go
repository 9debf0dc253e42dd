//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// churnRounds is how often the seven parallel ADDs and DELs repeat.
const churnRounds = 20

// TestLab07ParallelChurn: seven ADDs in parallel, then seven DELs in
// parallel, twenty times over. No call fails, every VF is back on the host
// after each round and no attachment record is left behind.
func TestLab07ParallelChurn(t *testing.T) {
	e := newEnv(t)
	vfs := theLab.PFs[0].VFs
	start := time.Now()
	for round := 1; round <= churnRounds; round++ {
		as := make([]*attachment, len(vfs))
		for i, v := range vfs {
			as[i] = e.attach(newPod(t, fmt.Sprintf("r%02d-pod%d", round, i)), v, opts{})
		}
		if err := inParallel(as, addAndVerify); err != nil {
			t.Fatalf("round %d: parallel ADD: %v", round, err)
		}
		wantRecords(t, e, len(as))
		if err := inParallel(as, (*attachment).del); err != nil {
			t.Fatalf("round %d: parallel DEL: %v", round, err)
		}
		for _, a := range as {
			if _, err := rootLinkOf(a.vf.PCI); err != nil {
				t.Fatalf("round %d: %s leaked: %v", round, a.vf, err)
			}
			if err := a.pod.vanish(); err != nil {
				t.Fatal(err)
			}
		}
		wantRecords(t, e, 0)
	}
	took := time.Since(start)
	t.Logf("%d rounds of %d parallel ADDs and DELs in %s (%s per round)",
		churnRounds, len(vfs), took.Round(time.Millisecond), (took / churnRounds).Round(time.Millisecond))
}

func addAndVerify(a *attachment) error {
	r, err := a.add()
	if err != nil {
		return fmt.Errorf("ADD %s: %w", a, err)
	}
	if err := verifyResult(a, r); err != nil {
		return err
	}
	return verifyInPod(a)
}

// inParallel runs f for every attachment at once and joins the errors.
func inParallel(as []*attachment, f func(*attachment) error) error {
	errs := make([]error, len(as))
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(a)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
