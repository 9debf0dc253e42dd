package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

// fleet is nodes × 8 PFs × 8 VFs with GUIDs unique on the fabric (the
// node index in the GUID, as hostconfig's scheme puts a node's identity
// in it).
func fleet(nodes int) map[string][]v1alpha1.VF {
	out := make(map[string][]v1alpha1.VF, nodes)
	for n := range nodes {
		vfs := make([]v1alpha1.VF, 0, 64)
		for pf := range 8 {
			for i := range 8 {
				v := vf(0x18+pf, i+1, fmt.Sprintf("a288:%04x:%04x:%02x%02x", n>>16, n&0xffff, pf, i+1), 0)
				v.PCI = fmt.Sprintf("0000:%02x:%02x.%d", 0x18+pf, 1+i/8, i%8)
				v.SysImageGUID = fmt.Sprintf("b8ce:%04x:%04x:00%02x", n>>16, n&0xffff, pf)
				vfs = append(vfs, v)
			}
		}
		out[fmt.Sprintf("gpu-%04d", n)] = vfs
	}
	return out
}

// BenchmarkColdStart: the index over 1,000 nodes × 64 VFs and every
// node's findings, as a controller starting over a full fleet computes
// them.
func BenchmarkColdStart(b *testing.B) {
	f := fleet(1000)
	for b.Loop() {
		l := New()
		for node, vfs := range f {
			l.Set(node, vfs)
		}
		for node := range f {
			if len(l.Findings(node)) != 0 {
				b.Fatal("findings on a clean fleet")
			}
		}
	}
}

// BenchmarkInject: one node takes another's GUID list and gives it back,
// with the findings of the nodes each change affects.
func BenchmarkInject(b *testing.B) {
	f := fleet(1000)
	l := New()
	for node, vfs := range f {
		l.Set(node, vfs)
	}
	copied := make([]v1alpha1.VF, len(f["gpu-0001"]))
	copy(copied, f["gpu-0001"])
	for i := range copied {
		copied[i].Since.Time = copied[i].Since.Add(time.Hour)
	}
	for b.Loop() {
		for _, vfs := range [][]v1alpha1.VF{copied, f["gpu-0002"]} {
			for _, n := range l.Set("gpu-0002", vfs) {
				l.Findings(n)
			}
		}
	}
}
