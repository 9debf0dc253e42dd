//go:build labguest

package guest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/bundle"
)

// readBundle is a support bundle's files by name.
func readBundle(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, _, err := bundle.Read(f, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestLabRDMA06SupportBundle: sriov-stable-agent bundle on the guest's real
// sysfs and netlink, with sst_ib devices on the igb PF and its VFs and a
// pod holding VF 0: sysfs shows every igbvf VF with its driver and the
// RDMA devices with their GUIDs and port states, RDMA netlink the devices
// in shared mode, netlink the PF's VFs, and the pod's record is there.
func TestLabRDMA06SupportBundle(t *testing.T) {
	e := newEnv(t)
	names := rdmaNode(t, false)
	vfs := theLab.PFs[0].VFs
	a := e.attach(newPod(t, "bundled"), vfs[0], opts{})
	mustAdd(t, a)
	defer mustDel(t, a)

	out := filepath.Join(e.dir, "node.tar.gz")
	r := run(t, nil, tool("sriov-stable-agent"), "bundle", "-o", out, "--sysfs-root", "/sys", "--state-dir", e.stateDir,
		"--metrics-url", "", "--kmsg", "/dev/kmsg", "--link-dir", e.dir)
	t.Logf("bundle exited %d after %s:\n%s", r.code, r.took.Round(1e6), r.stderr)
	if r.code != 0 {
		t.Fatalf("bundle exited %d, want 0", r.code)
	}
	files := readBundle(t, out)

	var fns []struct {
		Addr, Driver, PF string
		RDMA             []struct {
			Name, NodeGUID string
			Ports          []struct{ State, LinkLayer string }
		}
	}
	if err := json.Unmarshal(files["sysfs/functions.json"], &fns); err != nil {
		t.Fatalf("sysfs/functions.json: %v", err)
	}
	byAddr := map[string]int{}
	for i, f := range fns {
		byAddr[f.Addr] = i
	}
	for _, pf := range theLab.PFs {
		for _, v := range pf.VFs {
			i, ok := byAddr[v.PCI]
			if !ok || fns[i].Driver != "igbvf" || fns[i].PF != pf.PCI {
				t.Errorf("VF %s of %s: not in functions.json as an igbvf VF of its PF (%+v)", v.PCI, pf.PCI, fns[min(i, len(fns)-1)])
			}
		}
	}
	f := fns[byAddr[vfs[0].PCI]]
	if len(f.RDMA) != 1 || f.RDMA[0].Name != names[devVF0] || f.RDMA[0].NodeGUID != sysfsGUID(guidVF0) ||
		len(f.RDMA[0].Ports) != 1 || !strings.Contains(f.RDMA[0].Ports[0].State, "ACTIVE") || f.RDMA[0].Ports[0].LinkLayer != "InfiniBand" {
		t.Errorf("VF 0 %s: RDMA %+v, want %s with GUID %s, port ACTIVE, InfiniBand", vfs[0].PCI, f.RDMA, names[devVF0], sysfsGUID(guidVF0))
	}

	var view struct {
		NetnsMode string
		Devices   []struct{ Name, NodeGUID string }
	}
	if err := json.Unmarshal(files["netlink/rdma.json"], &view); err != nil {
		t.Fatalf("netlink/rdma.json: %v", err)
	}
	seen := map[string]string{}
	for _, d := range view.Devices {
		seen[d.Name] = d.NodeGUID
	}
	if view.NetnsMode != "shared" || seen[names[devPF]] != sysfsGUID(guidPF) || seen[names[devVF0]] != sysfsGUID(guidVF0) {
		t.Errorf("netlink/rdma.json: mode %q, devices %v; want shared, %s and %s among them", view.NetnsMode, seen, names[devPF], names[devVF0])
	}
	var links []struct {
		Name string
		VFs  []struct{ ID int }
	}
	if err := json.Unmarshal(files["netlink/links.json"], &links); err != nil {
		t.Fatalf("netlink/links.json: %v", err)
	}
	pfVFs := -1
	for _, l := range links {
		if l.Name == theLab.PFs[0].Link {
			pfVFs = len(l.VFs)
		}
	}
	if pfVFs != len(vfs) {
		t.Errorf("netlink/links.json: PF %s shows %d VFs, want %d", theLab.PFs[0].Link, pfVFs, len(vfs))
	}
	found := false
	for name, data := range files {
		if strings.HasPrefix(name, "state/attachments/") && strings.Contains(string(data), vfs[0].PCI) {
			found = true
		}
	}
	if !found {
		t.Errorf("no attachment record of VF %s in the bundle", vfs[0].PCI)
	}
	if !strings.Contains(string(files["doctor.json"]), `"findings"`) {
		t.Errorf("doctor.json: %.200s", files["doctor.json"])
	}
}
