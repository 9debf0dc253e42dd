//go:build labguest

package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/crashpoint"
)

// TestLab16CrashAfterAltNameAdded kills ADD (SIGKILL, from the plugin built
// with the crashpoints tag) right after it added the stable altname to a
// real VF that came without it, the one kill point of the crash test
// (integration/reliability) that veth stand-ins cannot reach: a VF is found
// without its altname only by its PCI parent. The kill must leave the VF in
// the pod as net1 with the altname and no record; the runtime's DEL must
// succeed and bring the VF home; the next ADD of the VF must succeed (the
// ownership check is not blocked) and its DEL leave no record.
func TestLab16CrashAfterAltNameAdded(t *testing.T) {
	if *crashBin == "" {
		t.Fatal("-lab.crashbin is not set: run.sh builds the crashpoints plugin and init.sh passes its directory")
	}
	if _, err := os.Stat(filepath.Join(*crashBin, "sriov-stable-cni")); err != nil {
		t.Fatalf("the crashpoints plugin: %v", err)
	}
	e := newEnv(t)
	// The crashpoints build first in the plugin path: host-device from the
	// lab's bin dir, sriov-stable-cni from the crash build.
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{*crashBin, *binDir}, filepath.Join(e.dir, "cache"), e.exec)
	v := theLab.PFs[0].VFs[3]
	home, err := rootLinkOf(v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if hasAltName(home, altNameOf(v)) {
		t.Fatalf("%s carries %s before ADD: the scenario needs a VF without it", v, altNameOf(v))
	}
	a := e.attach(newPod(t, "crash"), v, opts{})

	t.Setenv(crashpoint.Env, string(crashpoint.AltNameAdded))
	_, err = a.add()
	os.Unsetenv(crashpoint.Env)
	if err == nil {
		t.Fatalf("ADD %s completed: the crash point %s was not reached", a, crashpoint.AltNameAdded)
	}
	if !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("ADD %s failed, but not by SIGKILL at %s: %v", a, crashpoint.AltNameAdded, err)
	}
	t.Logf("ADD killed at %s: %v", crashpoint.AltNameAdded, err)

	// What the kill left: the VF in the pod as host-device named it, with
	// the altname ADD had just added, and no record.
	l, err := linkByParent(a.pod.Path(), v.PCI)
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	if l.Attrs().Name != ifName || !hasAltName(l, altNameOf(v)) {
		t.Fatalf("after the kill %s is %q with altnames %v, want %q with %s", v, l.Attrs().Name, l.Attrs().AltNames, ifName, altNameOf(v))
	}
	wantRecords(t, e, 0)

	// The runtime's DEL after the failed ADD: ours finds no record, leaves
	// the VF as net1 (the altname stays: it is the stable name hostconfig's
	// .link files give every VF), host-device takes it home.
	mustDel(t, a)
	wantRecords(t, e, 0)
	back, err := rootLinkOf(v.PCI)
	if err != nil {
		t.Fatal(err)
	}
	if !hasAltName(back, altNameOf(v)) {
		t.Fatalf("after DEL %s is home without %s: DEL removed an altname no record said ADD added", v, altNameOf(v))
	}
	t.Logf("after DEL %s is home as %s, altnames %v", v, back.Attrs().Name, back.Attrs().AltNames)

	// The next ADD of the VF, in another pod, without a crash point.
	b := e.attach(newPod(t, "after-crash"), v, opts{})
	mustAdd(t, b)
	wantRecords(t, e, 1)
	mustCheck(t, b)
	mustDel(t, b)
	wantRecords(t, e, 0)
}
