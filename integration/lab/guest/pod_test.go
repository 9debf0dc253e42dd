//go:build labguest

package guest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// pod is a sandbox as a runtime makes one: a named netns under /run/netns
// and a container ID.
type pod struct {
	Name string
	ID   string
	ns   ns.NetNS // nil once the netns is gone
}

// newPod creates a pod netns; the test's cleanup removes it (a VF still
// inside then returns to the root netns, which the lab's hygiene checks).
func newPod(t testing.TB, name string) *pod {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns for pod %s: %v", name, err)
	}
	p := &pod{Name: name, ID: containerID(), ns: n}
	t.Cleanup(func() {
		if err := p.vanish(); err != nil {
			t.Errorf("remove pod %s: %v", name, err)
		}
	})
	return p
}

// Path is the netns path a runtime passes as CNI_NETNS: empty once the
// netns is gone, as containerd passes it for a closed sandbox netns.
func (p *pod) Path() string {
	if p.ns == nil {
		return ""
	}
	return p.ns.Path()
}

// vanish deletes the pod's netns with no CNI DEL, as a crashed runtime or a
// node reboot leaves it. Safe to repeat.
func (p *pod) vanish() error {
	if p.ns == nil {
		return nil
	}
	n := p.ns
	p.ns = nil
	return errors.Join(n.Close(), testutils.UnmountNS(n))
}

func (p *pod) String() string { return fmt.Sprintf("pod %s (%s)", p.Name, p.Path()) }

func containerID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
