//go:build labguest

package guest

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestLab04VanishedPod: two pods' netns are deleted with their VFs inside
// and no DEL. The kernel returns the VFs to the root netns, the first as
// net1 and the second, net1 being taken, as dev<ifindex>. New pods with the
// same deviceIDs still get and verify the right VFs; the DELs of the
// vanished pods then succeed without touching the new pods.
func TestLab04VanishedPod(t *testing.T) {
	e := newEnv(t)
	vfs := theLab.PFs[0].VFs[3:5]
	var gone []*attachment
	for i, v := range vfs {
		a := e.attach(newPod(t, fmt.Sprintf("gone%d", i)), v, opts{})
		mustAdd(t, a)
		gone = append(gone, a)
	}
	stalePaths := make([]string, len(gone))
	for i, a := range gone {
		stalePaths[i] = a.pod.Path()
		if err := a.pod.vanish(); err != nil {
			t.Fatal(err)
		}
		l := waitBackInRoot(t, a.vf)
		t.Logf("%s came back to the root netns as %s", a.vf, l.Attrs().Name)
		if !returnedName(l) {
			t.Fatalf("%s came back as %q, want net1 or dev<ifindex>", a.vf, l.Attrs().Name)
		}
	}

	var fresh []*attachment
	for i, v := range vfs {
		a := e.attach(newPod(t, fmt.Sprintf("new%d", i)), v, opts{})
		mustAdd(t, a)
		mustCheck(t, a)
		fresh = append(fresh, a)
	}

	for i, a := range gone {
		// sriov-stable-cni alone, as a runtime that still passes the path
		// of the deleted netns would call it.
		if err := a.delOurs(stalePaths[i]); err != nil {
			t.Fatalf("DEL of sriov-stable-cni for vanished %s with netns %s: %v", a, stalePaths[i], err)
		}
		// The chain, as containerd calls it for a closed netns: empty CNI_NETNS.
		if err := a.del(); err != nil {
			t.Fatalf("DEL of the chain for vanished %s: %v", a, err)
		}
	}
	for _, a := range fresh {
		if err := verifyInPod(a); err != nil {
			t.Fatalf("after the vanished pods' DEL: %v", err)
		}
		mustCheck(t, a)
	}
	wantRecords(t, e, len(fresh))
	for _, a := range fresh {
		mustDel(t, a)
	}
	wantRecords(t, e, 0)
}

// waitBackInRoot waits for the kernel to return a VF from a destroyed netns.
func waitBackInRoot(t testing.TB, v vf) netlink.Link {
	t.Helper()
	var l netlink.Link
	err := poll(15*time.Second, func() (err error) { l, err = rootLinkOf(v.PCI); return err })
	if err != nil {
		t.Fatalf("%s did not come back to the root netns: %v", v, err)
	}
	return l
}

var devIndexName = regexp.MustCompile(`^dev[0-9]+$`)

// returnedName tells whether a link carries a name the kernel gives a device
// leaving a destroyed netns: its in-pod name, or dev<ifindex> if that is taken.
func returnedName(l netlink.Link) bool {
	n := l.Attrs().Name
	return n == ifName || (devIndexName.MatchString(n) && n == fmt.Sprintf("dev%d", l.Attrs().Index))
}
