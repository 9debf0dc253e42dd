package testutil

import "testing"

func TestVFAddr(t *testing.T) {
	for i, want := range map[int]string{0: "0000:18:00.2", 5: "0000:18:00.7", 6: "0000:18:01.0", 13: "0000:18:01.7", 14: "0000:18:02.0"} {
		if got := VFAddr(i); got != want {
			t.Errorf("VFAddr(%d) = %s, want %s", i, got, want)
		}
	}
}

func TestRootPolicy(t *testing.T) {
	for _, tc := range []struct {
		euid int
		ci   string
		want verdict
	}{
		{0, "", run}, {0, "1", run}, {1000, "", skip}, {1000, "1", fail}, {1000, "true", fail},
	} {
		if got := rootPolicy(tc.euid, tc.ci); got != tc.want {
			t.Errorf("rootPolicy(%d, %q) = %v, want %v", tc.euid, tc.ci, got, tc.want)
		}
	}
}
