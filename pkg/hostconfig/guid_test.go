package hostconfig

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

func mustGUID(t testing.TB, s string) sysfs.GUID {
	t.Helper()
	g, err := sysfs.ParseGUID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDeriveVFGUIDs(t *testing.T) {
	cases := []struct {
		pf         string
		vf         int
		node, port string
	}{
		{"b8:3f:d2:03:00:a1:b2:c4", 0, "ba:3f:d2:00:00:a1:b2:c4", "ba:3f:d2:80:00:a1:b2:c4"},
		{"b8:3f:d2:03:00:a1:b2:c4", 5, "ba:3f:d2:00:05:a1:b2:c4", "ba:3f:d2:80:05:a1:b2:c4"},
		{"b8:3f:d2:03:00:a1:b2:c5", 5, "ba:3f:d2:00:05:a1:b2:c5", "ba:3f:d2:80:05:a1:b2:c5"},
		{"b8:3f:d2:03:00:a1:b2:c4", 300, "ba:3f:d2:01:2c:a1:b2:c4", "ba:3f:d2:81:2c:a1:b2:c4"},
		{"b8:3f:d2:03:00:a1:b2:c4", MaxVFs - 1, "ba:3f:d2:7f:ff:a1:b2:c4", "ba:3f:d2:ff:ff:a1:b2:c4"},
		{"00:02:c9:03:00:00:00:01", 1, "02:02:c9:00:01:00:00:01", "02:02:c9:80:01:00:00:01"},
		{"0c:42:a1:03:00:ff:ff:ff", 7, "0e:42:a1:00:07:ff:ff:ff", "0e:42:a1:80:07:ff:ff:ff"},
	}
	for _, tc := range cases {
		got, err := DeriveVFGUIDs(mustGUID(t, tc.pf), tc.vf)
		if err != nil {
			t.Errorf("DeriveVFGUIDs(%s, %d): %v", tc.pf, tc.vf, err)
			continue
		}
		if got.Node.Colon() != tc.node || got.Port.Colon() != tc.port {
			t.Errorf("DeriveVFGUIDs(%s, %d) = node %s port %s, want node %s port %s",
				tc.pf, tc.vf, got.Node.Colon(), got.Port.Colon(), tc.node, tc.port)
		}
	}
}

func TestDeriveVFGUIDsRefuses(t *testing.T) {
	cases := []struct {
		name, pf string
		vf       int
		want     string
	}{
		{"zero", "00:00:00:00:00:00:00:00", 0, "is unset"},
		{"all-F", "ff:ff:ff:ff:ff:ff:ff:ff", 0, "is unset"},
		{"locally administered", "ba:3f:d2:03:00:a1:b2:c4", 0, "locally administered"},
		{"group bit", "b9:3f:d2:03:00:a1:b2:c4", 0, "group bit"},
		{"MAC-derived EUI-64", "b8:3f:d2:ff:fe:a1:b2:c4", 0, "does not have 03:00"},
		{"another middle", "b8:3f:d2:03:01:a1:b2:c4", 0, "does not have 03:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DeriveVFGUIDs(mustGUID(t, tc.pf), tc.vf)
			if !errors.Is(err, ErrGUIDNotDerivable) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.pf) {
				t.Errorf("DeriveVFGUIDs(%s) error %v, want ErrGUIDNotDerivable naming the GUID and %q", tc.pf, err, tc.want)
			}
		})
	}
	for _, vf := range []int{-1, MaxVFs} {
		if _, err := DeriveVFGUIDs(mustGUID(t, "b8:3f:d2:03:00:a1:b2:c4"), vf); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("VF index %d: error %v, want out of range", vf, err)
		}
	}
}

// mellanoxOUIs are OUIs seen on Mellanox/NVIDIA HCAs.
var mellanoxOUIs = []uint64{
	0xb83fd2, 0x0c42a1, 0x946dae, 0x1c34da, 0xa088c2, 0xe8ebd3, 0x043f72, 0x58a2e1,
	0x1070fd, 0x98039b, 0x506b4b, 0x7cfe90, 0x248a07, 0xec0d9a, 0x08c0eb, 0xb8cef6, 0x0002c9,
}

// realisticPFGUID is a burned-in ConnectX GUID: OUI, 03:00, a 24-bit serial.
func realisticPFGUID(rng *rand.Rand) sysfs.GUID {
	oui := mellanoxOUIs[rng.IntN(len(mellanoxOUIs))]
	return sysfs.GUID(oui<<40 | 0x0300<<24 | rng.Uint64N(1<<24))
}

// cluster returns the PF GUIDs of nodes DGX H200s: four dual-port cards per
// node, the two ports of a card consecutive, every card's serial unique
// (as the fabric requires of the PF GUIDs themselves).
func cluster(t testing.TB, rng *rand.Rand, nodes int) [][]sysfs.GUID {
	t.Helper()
	seen := map[sysfs.GUID]bool{}
	out := make([][]sysfs.GUID, nodes)
	for n := range out {
		for len(out[n]) < 8 {
			card := realisticPFGUID(rng) &^ 1
			if seen[card] || seen[card|1] {
				continue
			}
			seen[card], seen[card|1] = true, true
			out[n] = append(out[n], card, card|1)
		}
	}
	return out
}

// invert is the left inverse of DeriveVFGUIDs on its domain: it recovers
// the PF GUID, the VF index and whether the GUID is the port GUID. Its
// existence is the injectivity proof; the tests check it on every output.
func invert(g sysfs.GUID) (pf sysfs.GUID, vf int, port bool) {
	field := uint64(g>>guidFieldShift) & 0xffff
	pf = g &^ (guidLocalBit << 56) &^ (0xffff << guidFieldShift)
	pf |= guidIBMarker << guidFieldShift
	return pf, int(field &^ guidKindPort), field&guidKindPort != 0
}

// TestVFGUIDsInjective proves DeriveVFGUIDs injective where it is used:
// for every PF GUID of a realistic cluster, every VF index a ConnectX-7
// can have and both kinds, the output maps back to exactly its input; and
// PF GUIDs one bit apart in any position the scheme keeps give disjoint
// VF GUIDs.
func TestVFGUIDsInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(pf sysfs.GUID, vf int) VFGUIDs {
		g, err := DeriveVFGUIDs(pf, vf)
		if err != nil {
			t.Fatalf("DeriveVFGUIDs(%s, %d): %v", pf.Colon(), vf, err)
		}
		for kind, out := range []sysfs.GUID{g.Node, g.Port} {
			p, v, port := invert(out)
			if p != pf || v != vf || port != (kind == 1) {
				t.Fatalf("%s from PF %s VF %d kind %d inverts to PF %s VF %d port %v", out.Colon(), pf.Colon(), vf, kind, p.Colon(), v, port)
			}
		}
		return g
	}
	for _, node := range cluster(t, rng, 100) {
		for _, pf := range node {
			for vf := 0; vf < 128; vf++ { // ConnectX-7 tops out at 127 VFs per PF
				check(pf, vf)
			}
		}
	}
	for i := 0; i < 20000; i++ {
		check(realisticPFGUID(rng), rng.IntN(MaxVFs))
	}

	// One-bit neighbours: every bit the scheme keeps (bytes 0-2 but the U/L
	// and I/G bits, bytes 5-7) distinguishes the outputs.
	base := mustGUID(t, "b8:3f:d2:03:00:a1:b2:c4")
	seen := map[sysfs.GUID]string{}
	for bit := -1; bit < 64; bit++ {
		pf := base
		if bit >= 0 {
			if bit >= 24 && bit < 40 || bit == 56 || bit == 57 {
				continue // the 03:00 field and the U/L, I/G bits are fixed by the domain
			}
			pf ^= 1 << bit
		}
		for vf := 0; vf < 8; vf++ {
			g := check(pf, vf)
			for _, out := range []sysfs.GUID{g.Node, g.Port} {
				if other, dup := seen[out]; dup {
					t.Fatalf("%s derived twice: %s and PF %s VF %d", out.Colon(), other, pf.Colon(), vf)
				}
				seen[out] = pf.Colon()
			}
		}
	}
}

// TestVFGUIDsUniqueAcross1000Nodes simulates the fabric of 1,000 DGX H200
// nodes (8 PFs × 8 VFs each): 128,000 node and port GUIDs, all distinct,
// none zero or all-F, none a PF's GUID, all locally administered and
// unicast, every VF's node GUID different from its port GUID.
func TestVFGUIDsUniqueAcross1000Nodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1000, 8))
	nodes := cluster(t, rng, 1000)
	pfs := map[sysfs.GUID]bool{}
	for _, n := range nodes {
		for _, pf := range n {
			pfs[pf] = true
		}
	}
	owner := make(map[sysfs.GUID]string, 1000*8*8*2)
	for n, node := range nodes {
		for p, pf := range node {
			for vf := 0; vf < 8; vf++ {
				g, err := DeriveVFGUIDs(pf, vf)
				if err != nil {
					t.Fatalf("node %d PF %d (%s): %v", n, p, pf.Colon(), err)
				}
				if g.Node == g.Port {
					t.Fatalf("node %d PF %d VF %d: node GUID = port GUID = %s", n, p, vf, g.Node.Colon())
				}
				for _, out := range []sysfs.GUID{g.Node, g.Port} {
					who := pf.Colon() + " VF " + string(rune('0'+vf))
					switch {
					case !out.Valid():
						t.Fatalf("%s: GUID %s is zero or all-F", who, out.Colon())
					case pfs[out]:
						t.Fatalf("%s: GUID %s is a PF's burned-in GUID", who, out.Colon())
					case byte(out>>56)&guidLocalBit == 0 || byte(out>>56)&guidGroupBit != 0:
						t.Fatalf("%s: GUID %s is not a locally administered unicast GUID", who, out.Colon())
					}
					if other, dup := owner[out]; dup {
						t.Fatalf("GUID %s derived for %s and %s", out.Colon(), other, who)
					}
					owner[out] = who
				}
			}
		}
	}
	if len(owner) != 1000*8*8*2 {
		t.Fatalf("%d distinct GUIDs, want %d", len(owner), 1000*8*8*2)
	}
}
