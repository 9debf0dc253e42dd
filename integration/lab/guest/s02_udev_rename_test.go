//go:build labguest

package guest

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLab02UdevRenameRepaired: udev renames the VF inside the pod after
// host-device moved it and before sriov-stable-cni runs; ADD finds it by
// PCI parent anyway and repairs the name to CNI_IFNAME.
func TestLab02UdevRenameRepaired(t *testing.T) {
	e := newEnv(t)
	v := theLab.PFs[0].VFs[1]
	a := e.attach(newPod(t, "udev"), v, opts{})
	var renamed atomic.Bool
	e.exec.setBefore(func(plugin string, env map[string]string) error {
		if plugin != "sriov-stable-cni" || env["CNI_COMMAND"] != "ADD" {
			return nil
		}
		l, err := linkByParent(env["CNI_NETNS"], v.PCI)
		if err != nil {
			return err
		}
		renamed.Store(true)
		return renameLink(env["CNI_NETNS"], l, udevName(v.PCI))
	})
	mustAdd(t, a)
	e.exec.setBefore(nil)
	if !renamed.Load() {
		t.Fatal("the udev stand-in never ran before sriov-stable-cni's ADD")
	}
	t.Logf("%s was renamed to %s between host-device and sriov-stable-cni, and repaired to %s", v, udevName(v.PCI), ifName)
	mustCheck(t, a)
	mustDel(t, a)
	wantRecords(t, e, 0)
}

// udevName is the predictable name udev would give a PCI function:
// 0000:01:10.2 → enp1s16f2.
func udevName(pci string) string {
	parts := strings.FieldsFunc(pci, func(r rune) bool { return r == ':' || r == '.' })
	if len(parts) != 4 {
		return "enpX"
	}
	n := make([]int64, 4)
	for i, p := range parts {
		n[i], _ = strconv.ParseInt(p, 16, 32)
	}
	return fmt.Sprintf("enp%ds%df%d", n[1], n[2], n[3])
}
