//go:build labguest

package guest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"
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
	p, err := makePod(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.vanish(); err != nil {
			t.Errorf("remove pod %s: %v", name, err)
		}
	})
	return p
}

// makePod creates a pod netns that the caller must vanish; for goroutines,
// where a test may not stop.
func makePod(name string) (*pod, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, fmt.Errorf("create netns for pod %s: %w", name, err)
	}
	return &pod{Name: name, ID: containerID(), ns: n}, nil
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
	return errors.Join(n.Close(), unmountNetns(n.Path()))
}

// unmountNetns removes a pod's netns bind mount, and with it the netns
// once nothing else holds it. A plugin that another goroutine is starting
// holds every open file of the test between its fork and its exec, the
// netns file included, and the unmount fails with EBUSY meanwhile: retry.
// Equivalent to: umount $path; rm $path
func unmountNetns(path string) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err = unix.Unmount(path, 0)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	return os.Remove(path)
}

func (p *pod) String() string { return fmt.Sprintf("pod %s (%s)", p.Name, p.Path()) }

func containerID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
