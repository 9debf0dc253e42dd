//go:build labguest

package guest

import (
	"fmt"
	"testing"
)

// TestLab01SevenPodsByPCI: seven pods each get one VF of the first PF by PCI
// address; every result carries that VF's pciID and MAC, every pod holds
// exactly that VF as net1, CHECK passes for all, DEL returns them all.
func TestLab01SevenPodsByPCI(t *testing.T) {
	e := newEnv(t)
	var as []*attachment
	for i, v := range theLab.PFs[0].VFs {
		as = append(as, e.attach(newPod(t, fmt.Sprintf("pod%d", i)), v, opts{}))
	}
	addCheckDel(t, e, as)
}
