//go:build labguest

package guest

import (
	"testing"
)

// TestLab14HostNameTakenAtDel: host-device returns a VF on DEL under the
// name it had on the host before ADD. A VF that came back from a deleted
// pod netns carries its in-pod name, net1, on the host; ADDed again, net1
// is the name host-device will restore. If meanwhile a second VF comes
// back from another deleted pod and takes net1 on the host, the first
// VF's DEL must still succeed and return it: otherwise the runtime's DEL
// fails on every retry and the VF stays in the pod netns.
func TestLab14HostNameTakenAtDel(t *testing.T) {
	e := newEnv(t)
	first, second := theLab.PFs[1].VFs[4], theLab.PFs[1].VFs[5]

	// first comes back from a deleted pod as net1, and its DEL (empty
	// CNI_NETNS, as containerd sends it) drops the record.
	vanished := e.attach(newPod(t, "vanished-a"), first, opts{})
	mustAdd(t, vanished)
	if err := vanished.pod.vanish(); err != nil {
		t.Fatal(err)
	}
	if l := waitBackInRoot(t, first); l.Attrs().Name != ifName {
		t.Fatalf("%s came back as %s, want %s (is another link named %s?)", first, l.Attrs().Name, ifName, ifName)
	}
	if err := vanished.del(); err != nil {
		t.Fatalf("DEL of the vanished pod: %v", err)
	}

	// first, named net1 on the host, goes into a new pod.
	running := e.attach(newPod(t, "running"), first, opts{})
	mustAdd(t, running)

	// second comes back from another deleted pod and takes net1.
	other := e.attach(newPod(t, "vanished-b"), second, opts{})
	mustAdd(t, other)
	if err := other.pod.vanish(); err != nil {
		t.Fatal(err)
	}
	if l := waitBackInRoot(t, second); l.Attrs().Name != ifName {
		t.Fatalf("%s came back as %s, want %s", second, l.Attrs().Name, ifName)
	}
	if err := other.del(); err != nil {
		t.Fatalf("DEL of the second vanished pod: %v", err)
	}
	t.Logf("%s is in %s; %s took its host name %s", first, running.pod, second, ifName)

	// The runtime DELs the running pod: first must come home.
	mustDel(t, running)
	host, err := rootLinkOf(first.PCI)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after DEL %s is %s on the host", first, host.Attrs().Name)
	wantRecords(t, e, 0)
}
