package vfnet

import "testing"

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want      NameKind
		transient bool
		kernel    bool
	}{
		{"eth0", NameProbe, false, true},
		{"ib12", NameProbe, false, true},
		{"wlan3", NameProbe, false, true},
		{"dev17", NameClash, true, true},
		{"net1", NamePod, true, false},
		{"net", NameChosen, false, false},
		{"net1a", NameChosen, false, false},
		{"eth0.100", NameChosen, false, false},
		{"ibs9f0v0", NameChosen, false, false},
		{"vf18s00f2", NameChosen, false, false},
		{"device1", NameChosen, false, false},
		{"", NameChosen, false, false},
	} {
		k := KindOf(tc.name)
		if k != tc.want || k.Transient() != tc.transient || k.Kernel() != tc.kernel {
			t.Errorf("KindOf(%q) = %d (transient %v, kernel %v), want %d (%v, %v)",
				tc.name, k, k.Transient(), k.Kernel(), tc.want, tc.transient, tc.kernel)
		}
	}
}
