package kubecluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseMountinfo: mount point, type and source of each line, whatever
// optional fields stand before the separator; a line without one is
// passed over.
func TestParseMountinfo(t *testing.T) {
	table := strings.Join([]string{
		"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro",
		"36 22 0:32 / /run rw,nosuid,nodev shared:5 master:1 - tmpfs tmpfs rw,mode=755",
		"40 36 0:4 net:[4026532] /run/netns/cni-1 rw - nsfs nsfs rw",
		"41 36 0:45 / /sys/class ro,relatime - overlay overlay ro,lowerdir=/run/sriov-e2e/x:/sys/class",
		"not a mountinfo line",
	}, "\n")
	got, err := parseMountinfo(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/ ext4 /dev/sda1": true, "/run tmpfs tmpfs": true, "/run/netns/cni-1 nsfs nsfs": true,
		"/sys/class overlay overlay": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
}
