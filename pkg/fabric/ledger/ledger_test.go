package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// vf is a VF of PF 0000:<bus>:00.0 published at t0+at, node and port
// GUID guid, no system image GUID.
func vf(bus, fn int, guid string, at time.Duration) v1alpha1.VF {
	return v1alpha1.VF{PCI: fmt.Sprintf("0000:%02x:00.%d", bus, fn), PF: fmt.Sprintf("0000:%02x:00.0", bus),
		NodeGUID: guid, PortGUIDs: []string{guid},
		LinkLayer: "InfiniBand", PortState: "ACTIVE", Since: metav1.NewTime(t0.Add(at))}
}

// brief is a finding as the table states it.
type brief struct {
	PCI    string
	Kind   v1alpha1.FindingKind
	Second bool
	Others string // node/pci of each other holder
}

func briefs(fs []v1alpha1.Finding) []brief {
	out := []brief{}
	for _, f := range fs {
		var others []string
		for _, h := range f.Others {
			others = append(others, h.Node+"/"+h.PCI)
		}
		out = append(out, brief{PCI: f.PCI, Kind: f.Kind, Second: f.Second, Others: strings.Join(others, " ")})
	}
	return out
}

func TestFindings(t *testing.T) {
	const g1, g2 = "a288:c2ff:fe18:0001", "a288:c2ff:fe18:0002"
	cases := []struct {
		name  string
		nodes map[string][]v1alpha1.VF
		node  string
		want  []brief
	}{{
		name: "unique GUIDs: nothing",
		nodes: map[string][]v1alpha1.VF{
			"a": {vf(0x18, 1, g1, 0)},
			"b": {vf(0x19, 1, g2, 0)},
		},
		node: "a", want: []brief{},
	}, {
		// The classic recipe: one static list on every node.
		name: "one GUID on two nodes: the later publisher is second",
		nodes: map[string][]v1alpha1.VF{
			"a": {vf(0x18, 1, g1, time.Minute)},
			"b": {vf(0x19, 1, g1, 0)},
		},
		node: "a", want: []brief{
			{"0000:18:00.1", v1alpha1.DuplicateNodeGUID, true, "b/0000:19:00.1"},
			{"0000:18:00.1", v1alpha1.DuplicatePortGUID, true, "b/0000:19:00.1"},
		},
	}, {
		name: "the first publisher keeps it, others listed in the order they came",
		nodes: map[string][]v1alpha1.VF{
			"a": {vf(0x18, 1, g1, 0)},
			"b": {vf(0x19, 1, g1, 2*time.Minute)},
			"c": {vf(0x1a, 1, g1, time.Minute)},
		},
		node: "a", want: []brief{
			{"0000:18:00.1", v1alpha1.DuplicateNodeGUID, false, "c/0000:1a:00.1 b/0000:19:00.1"},
			{"0000:18:00.1", v1alpha1.DuplicatePortGUID, false, "c/0000:1a:00.1 b/0000:19:00.1"},
		},
	}, {
		name: "published at the same moment: the node name decides",
		nodes: map[string][]v1alpha1.VF{
			"b": {vf(0x18, 1, g1, 0)},
			"a": {vf(0x19, 1, g1, 0)},
		},
		node: "b", want: []brief{
			{"0000:18:00.1", v1alpha1.DuplicateNodeGUID, true, "a/0000:19:00.1"},
			{"0000:18:00.1", v1alpha1.DuplicatePortGUID, true, "a/0000:19:00.1"},
		},
	}, {
		name: "two VFs of one node",
		nodes: map[string][]v1alpha1.VF{
			"a": {vf(0x18, 2, g1, 0), vf(0x18, 1, g1, 0)},
		},
		node: "a", want: []brief{
			{"0000:18:00.1", v1alpha1.DuplicateNodeGUID, false, "a/0000:18:00.2"},
			{"0000:18:00.1", v1alpha1.DuplicatePortGUID, false, "a/0000:18:00.2"},
			{"0000:18:00.2", v1alpha1.DuplicateNodeGUID, true, "a/0000:18:00.1"},
			{"0000:18:00.2", v1alpha1.DuplicatePortGUID, true, "a/0000:18:00.1"},
		},
	}, {
		// Unassigned GUIDs are not duplicates of each other: each is
		// invalid on its own.
		name: "zero, all ones and garbage are invalid, not duplicates",
		nodes: map[string][]v1alpha1.VF{
			"a": {vf(0x18, 1, "0000:0000:0000:0000", 0), vf(0x18, 2, "ffff:ffff:ffff:ffff", 0), vf(0x18, 3, "not-a-guid", 0)},
			"b": {vf(0x19, 1, "0000:0000:0000:0000", 0)},
		},
		node: "a", want: []brief{
			{"0000:18:00.1", v1alpha1.InvalidGUID, false, ""},
			{"0000:18:00.1", v1alpha1.InvalidGUID, false, ""},
			{"0000:18:00.2", v1alpha1.InvalidGUID, false, ""},
			{"0000:18:00.2", v1alpha1.InvalidGUID, false, ""},
			{"0000:18:00.3", v1alpha1.InvalidGUID, false, ""},
			{"0000:18:00.3", v1alpha1.InvalidGUID, false, ""},
		},
	}, {
		name: "a GUID not read is not judged",
		nodes: map[string][]v1alpha1.VF{
			"a": {{PCI: "0000:18:00.1", PF: "0000:18:00.0", Since: metav1.NewTime(t0)}},
			"b": {{PCI: "0000:18:00.1", PF: "0000:18:00.0", Since: metav1.NewTime(t0)}},
		},
		node: "a", want: []brief{},
	}, {
		// VFs of one PF, and the two PFs of one card, share a system
		// image GUID; two cards must not.
		name: "a system image GUID on two NICs",
		nodes: func() map[string][]v1alpha1.VF {
			a1, a2, other := vf(0x18, 1, g1, 0), vf(0x18, 2, g2, 0), vf(0x19, 1, "a288:c2ff:fe18:0003", 0)
			port1 := vf(0x18, 1, "a288:c2ff:fe18:0004", 0)
			port1.PCI, port1.PF = "0000:18:00.5", "0000:18:00.1" // the card's second PF
			apart := vf(0x1a, 1, "a288:c2ff:fe18:0005", 0)
			for _, v := range []*v1alpha1.VF{&a1, &a2, &port1, &other} {
				v.SysImageGUID = "b8ce:f603:0018:0000"
			}
			apart.SysImageGUID = "b8ce:f603:001a:0000"
			return map[string][]v1alpha1.VF{"a": {a1, a2, port1, apart}, "b": {other}}
		}(),
		node: "a", want: []brief{
			{"0000:18:00.1", v1alpha1.SharedSysImageGUID, false, "b/0000:19:00.1"},
			{"0000:18:00.2", v1alpha1.SharedSysImageGUID, false, "b/0000:19:00.1"},
			{"0000:18:00.5", v1alpha1.SharedSysImageGUID, false, "b/0000:19:00.1"},
		},
	}, {
		name: "a rail whose link layer differs from most nodes'",
		nodes: func() map[string][]v1alpha1.VF {
			eth := vf(0x18, 1, "a288:c2ff:fe18:0013", 0)
			eth.LinkLayer = "Ethernet"
			return map[string][]v1alpha1.VF{
				"a": {eth},
				"b": {vf(0x18, 1, "a288:c2ff:fe18:0011", 0)},
				"c": {vf(0x18, 1, "a288:c2ff:fe18:0012", 0)},
			}
		}(),
		node: "a", want: []brief{{"0000:18:00.1", v1alpha1.LinkLayerMismatch, false, ""}},
	}, {
		name: "no majority on the rail: nothing",
		nodes: func() map[string][]v1alpha1.VF {
			eth := vf(0x18, 1, "a288:c2ff:fe18:0013", 0)
			eth.LinkLayer = "Ethernet"
			return map[string][]v1alpha1.VF{"a": {eth}, "b": {vf(0x18, 1, "a288:c2ff:fe18:0011", 0)}}
		}(),
		node: "a", want: []brief{},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := New()
			for name, vfs := range c.nodes {
				l.Set(name, vfs)
			}
			got := l.Findings(c.node)
			if diff := cmp.Diff(c.want, briefs(got)); diff != "" {
				t.Errorf("findings of %s (-want +got):\n%s", c.node, diff)
			}
			for _, f := range got {
				if !strings.Contains(f.Message, f.PCI) || len(f.Message) > maxMessage {
					t.Errorf("message %q does not name VF %s or is over %d bytes", f.Message, f.PCI, maxMessage)
				}
			}
		})
	}
}

// The message of a second holder says who keeps the GUID and what to do.
func TestDuplicateMessage(t *testing.T) {
	l := New()
	first := vf(0x18, 1, "a288:c2ff:fe18:0001", 0)
	first.Pod = &v1alpha1.PodRef{Namespace: "train", Name: "nccl-0"}
	l.Set("gpu-a", []v1alpha1.VF{first})
	l.Set("gpu-b", []v1alpha1.VF{vf(0x19, 1, "a288:c2ff:fe18:0001", time.Hour)})
	got := l.Findings("gpu-b")[0].Message
	want := "node GUID a288:c2ff:fe18:0001 of VF 0000:19:00.1 on node gpu-b is also held by node gpu-a VF 0000:18:00.1 (pod train/nccl-0); " +
		"node gpu-a VF 0000:18:00.1 (pod train/nccl-0) published it first: give this VF a GUID unique on the fabric (sriov-stable-agent hostconfig apply) and restart the pod holding it"
	if got != want {
		t.Errorf("message\n got %s\nwant %s", got, want)
	}
}

// Set and Delete name every node whose findings may change: a node that
// drops a shared GUID frees its co-holders, and a rail whose usual link
// layer flips concerns all its nodes.
func TestAffected(t *testing.T) {
	const g = "a288:c2ff:fe18:0001"
	l := New()
	l.Set("a", []v1alpha1.VF{vf(0x18, 1, g, 0)})
	if got := l.Set("b", []v1alpha1.VF{vf(0x18, 1, g, 0)}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("b taking a's GUID affects %v, want [a b]", got)
	}
	if got := l.Set("c", []v1alpha1.VF{vf(0x19, 1, "a288:c2ff:fe18:0009", 0)}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("c with a GUID of its own affects %v, want [c]", got)
	}
	if got := l.Set("b", []v1alpha1.VF{vf(0x18, 1, "a288:c2ff:fe18:0002", 0)}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("b fixing its GUID affects %v, want [a b]", got)
	}
	if fs := l.Findings("a"); len(fs) != 0 {
		t.Errorf("a still has findings after b fixed its GUID: %v", briefs(fs))
	}
	l.Set("b", []v1alpha1.VF{vf(0x18, 1, g, 0)})
	if got := l.Delete("a"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("deleting a affects %v, want [a b]", got)
	}
	if fs := l.Findings("b"); len(fs) != 0 || l.Findings("a") != nil {
		t.Errorf("after a went: b's findings %v, a's %v; want none", briefs(fs), l.Findings("a"))
	}
	eth := vf(0x18, 1, "a288:c2ff:fe18:0003", 0)
	eth.LinkLayer = "Ethernet"
	// Rail 0 (each node's first PF): b and c InfiniBand, d Ethernet.
	l.Set("d", []v1alpha1.VF{eth})
	eth.NodeGUID, eth.PortGUIDs = "a288:c2ff:fe18:0004", nil
	if fs := l.Findings("d"); len(fs) != 1 || fs[0].Kind != v1alpha1.LinkLayerMismatch {
		t.Errorf("d, the one Ethernet node of rail 0: findings %v, want a link layer mismatch", briefs(fs))
	}
	// e ties the rail: it has no usual link layer any more, so d's
	// finding goes and every node of the rail is affected.
	if got := l.Set("e", []v1alpha1.VF{eth}); !slices.Equal(got, []string{"b", "c", "d", "e"}) {
		t.Errorf("e tying rail 0 affects %v, want its nodes [b c d e]", got)
	}
	if fs := l.Findings("d"); len(fs) != 0 {
		t.Errorf("d on a tied rail: findings %v, want none", briefs(fs))
	}
}

// However Set and Delete come, the findings are those of a ledger built at
// once from the final state: the index forgets nothing and keeps nothing
// stale. GUIDs come from a small pool so that duplicates are common.
func TestIncrementalEqualsRebuilt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	guid := func() string {
		switch rng.IntN(10) {
		case 0:
			return "0000:0000:0000:0000"
		case 1:
			return ""
		}
		return fmt.Sprintf("a288:c2ff:fe18:%04x", rng.IntN(40))
	}
	layers := []string{"InfiniBand", "InfiniBand", "Ethernet"}
	l := New()
	final := map[string][]v1alpha1.VF{}
	for range 2000 {
		node := fmt.Sprintf("n%02d", rng.IntN(20))
		if rng.IntN(5) == 0 {
			l.Delete(node)
			delete(final, node)
			continue
		}
		var vfs []v1alpha1.VF
		for i := range rng.IntN(4) {
			v := vf(0x18+rng.IntN(2), i+1, guid(), time.Duration(rng.IntN(5))*time.Second)
			v.PortGUIDs = []string{guid()}
			v.SysImageGUID = fmt.Sprintf("b8ce:f603:0000:%04x", rng.IntN(8))
			v.LinkLayer = layers[rng.IntN(len(layers))]
			vfs = append(vfs, v)
		}
		l.Set(node, vfs)
		if len(vfs) > 0 {
			final[node] = vfs
		} else {
			delete(final, node)
		}
	}
	rebuilt := New()
	for node, vfs := range final {
		rebuilt.Set(node, vfs)
	}
	if l.Nodes() != rebuilt.Nodes() {
		t.Fatalf("incremental ledger has %d nodes, rebuilt %d", l.Nodes(), rebuilt.Nodes())
	}
	for node := range final {
		if diff := cmp.Diff(rebuilt.Findings(node), l.Findings(node)); diff != "" {
			t.Errorf("findings of %s (-rebuilt +incremental):\n%s", node, diff)
		}
	}
	for _, idx := range []int{len(l.nodeGUIDs), len(l.portGUIDs), len(l.sysGUIDs)} {
		if idx > 40+8 {
			t.Errorf("an index holds %d GUIDs, more than the pool: stale keys", idx)
		}
	}
}

// Stats count each duplicated GUID once however many hold it, system
// image GUIDs only across NICs, and every invalid GUID.
func TestStats(t *testing.T) {
	l := New()
	a := []v1alpha1.VF{vf(0x18, 1, "a288:c2ff:fe18:0001", 0), vf(0x18, 2, "0000:0000:0000:0000", 0)}
	a[0].SysImageGUID, a[1].SysImageGUID = "b8ce:f603:0018:0000", "b8ce:f603:0018:0000" // one NIC
	l.Set("a", a)
	b := vf(0x19, 1, "a288:c2ff:fe18:0001", 0)
	b.SysImageGUID = "b8ce:f603:0019:0000"
	l.Set("b", []v1alpha1.VF{b})
	c := vf(0x19, 1, "a288:c2ff:fe18:0001", 0)
	c.SysImageGUID = "b8ce:f603:0019:0000" // b's NIC's, on another node
	l.Set("c", []v1alpha1.VF{c})
	got := l.Stats()
	want := Stats{Nodes: 3, VFs: 4, Invalid: 2, Duplicates: map[v1alpha1.FindingKind]int{
		v1alpha1.DuplicateNodeGUID: 1, v1alpha1.DuplicatePortGUID: 1, v1alpha1.SharedSysImageGUID: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// Conflicts has a row per wrong GUID with every holder, first first.
func TestConflicts(t *testing.T) {
	l := New()
	l.Set("b", []v1alpha1.VF{vf(0x18, 1, "a288:c2ff:fe18:0001", time.Minute)})
	l.Set("a", []v1alpha1.VF{vf(0x18, 1, "a288:c2ff:fe18:0001", 0), vf(0x18, 2, "0000:0000:0000:0000", 0)})
	l.Set("c", []v1alpha1.VF{vf(0x18, 1, "a288:c2ff:fe18:0003", 0)})
	type row struct {
		Kind    v1alpha1.FindingKind
		GUID    string
		Field   string
		Holders string
	}
	var got []row
	for _, c := range l.Conflicts() {
		var hs []string
		for _, h := range c.Holders {
			hs = append(hs, h.Node+"/"+h.PCI)
		}
		got = append(got, row{c.Kind, c.GUID, c.Field, strings.Join(hs, " ")})
	}
	want := []row{
		{v1alpha1.DuplicateNodeGUID, "a288:c2ff:fe18:0001", "", "a/0000:18:00.1 b/0000:18:00.1"},
		{v1alpha1.DuplicatePortGUID, "a288:c2ff:fe18:0001", "", "a/0000:18:00.1 b/0000:18:00.1"},
		{v1alpha1.InvalidGUID, "0000:0000:0000:0000", "node GUID", "a/0000:18:00.2"},
		{v1alpha1.InvalidGUID, "0000:0000:0000:0000", "port GUID", "a/0000:18:00.2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
}
