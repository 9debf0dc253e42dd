//go:build labguest

package guest

import (
	"strings"
	"testing"
)

// TestLab10NodeDoctor: `sriov-stable-agent doctor` on a real kernel's sysfs
// with SR-IOV devices that are not Mellanox (two igb PFs, fourteen igbvf
// VFs): it must not crash, must say there is nothing to check, and must
// exit 0; reading the real /dev/kmsg (to its end, without blocking) must
// not change that.
func TestLab10NodeDoctor(t *testing.T) {
	newEnv(t)
	for _, kmsg := range []string{"", "/dev/kmsg"} {
		r := run(t, nil, tool("sriov-stable-agent"), "doctor", "--sysfs-root", "/sys", "--kmsg="+kmsg)
		t.Logf("doctor --kmsg=%q exited %d after %s:\n%s%s", kmsg, r.code, r.took.Round(1e6), r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("doctor --kmsg=%q exited %d, want 0", kmsg, r.code)
		}
		if strings.Contains(r.stderr, "panic") || strings.Contains(r.stdout, "panic") {
			t.Fatalf("doctor --kmsg=%q panicked", kmsg)
		}
		for _, want := range []string{"no Mellanox", "nothing to check", "0 Mellanox PFs, 0 VFs", "0 errors, 0 warnings"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("doctor --kmsg=%q does not say %q", kmsg, want)
			}
		}
	}
}
