//go:build labguest

package guest

import (
	"fmt"
	"testing"
)

// TestLab08FourteenVFsOnTwoPFs: fourteen pods get the fourteen VFs of both
// PFs (0000:01:1x.y and 0000:02:1x.y share function numbers, so a lookup
// that ignored the bus would mix them up); all verify, CHECK and DEL.
func TestLab08FourteenVFsOnTwoPFs(t *testing.T) {
	if len(theLab.PFs) < 2 {
		t.Fatalf("the lab booted %d PFs, this scenario needs 2", len(theLab.PFs))
	}
	e := newEnv(t)
	var as []*attachment
	for i, v := range theLab.allVFs() {
		as = append(as, e.attach(newPod(t, fmt.Sprintf("pod%02d", i)), v, opts{}))
	}
	if err := inParallel(as, addAndVerify); err != nil {
		t.Fatalf("parallel ADD of %d VFs: %v", len(as), err)
	}
	wantRecords(t, e, len(as))
	for _, a := range as {
		mustCheck(t, a)
	}
	if err := inParallel(as, (*attachment).del); err != nil {
		t.Fatalf("parallel DEL: %v", err)
	}
	wantRecords(t, e, 0)
}
