package doctor

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// dgxSpec is the hostconfig spec of the DGX H200 fixture: every ConnectX-7
// PF, InfiniBand, 8 VFs named ib<pfidx>v<vf>, GUIDs derived from the PF's.
const dgxSpec = `
linkType: infiniband
vfs: 8
pfs:
  - match: {vendor: 0x15b3, device: 0x1021}
`

// dgxAsSpecified lays the DGX fixture out as the hostconfig boot unit
// leaves it: VF names and GUIDs as the spec derives them.
func dgxAsSpecified(t *testing.T) (*sysfstest.DGXNode, *hostconfig.Spec) {
	t.Helper()
	spec, err := hostconfig.ParseSpec([]byte(dgxSpec))
	if err != nil {
		t.Fatal(err)
	}
	n := dgxOnHost(t)
	for i, pf := range n.PFs {
		pfGUID, err := sysfs.ParseGUID(pf.NodeGUID)
		if err != nil {
			t.Fatal(err)
		}
		for j, vf := range pf.VFs {
			g, err := hostconfig.DeriveVFGUIDs(pfGUID, vf.Index)
			if err != nil {
				t.Fatalf("derive GUIDs of %s: %v", vf.PCI, err)
			}
			n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: g.Node.String(), FWVer: sysfstest.DGXFirmware,
				Ports: []sysfstest.Port{{GID0: sysfstest.GID0(g.Port.String())}}})
			n.PFs[i].VFs[j].NodeGUID, n.PFs[i].VFs[j].PortGUID = g.Node.String(), g.Port.String()
			if j < 4 {
				name := fmt.Sprintf("ib%dv%d", i, vf.Index)
				n.RenameNetDev(vf.PCI, vf.NetDev, name)
				n.PFs[i].VFs[j].NetDev = name
			}
		}
	}
	return n, spec
}

// With --spec the node is also compared with its hostconfig spec: what only
// the spec knows (names, derived GUIDs) is added, and where both report the
// same check about the same device the doctor's own finding stands alone.
func TestSpecFindingsAreMerged(t *testing.T) {
	n, spec := dgxAsSpecified(t)
	opts := Options{SysfsRoot: n.Root, ExpectVFs: 8, LinkLayer: config.LinkLayerInfiniBand, Spec: spec}
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Healthy as specified. Altnames cannot be read outside the node's netns,
	// and the spec cannot name VFs that are in pods: one info line each.
	healthy := []key{{SeverityInfo, finding.CheckSpec, "node"}, {SeverityInfo, finding.CheckVFAltName, "node"}}
	if diff := cmp.Diff(healthy, keys(t, rep)); diff != "" {
		t.Fatalf("node as specified (-want +got):\n%s\n%s", diff, text(t, rep))
	}

	n.SetNumVFs(0, 6)                                // both the doctor and the spec see it
	n.RenameNetDev("0000:40:00.2", "ib2v0", "ib7v7") // only the spec's names say it is wrong
	vf := n.PFs[5].VFs[1]                            // a valid GUID, not the derived one
	n.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: "a288:c2ff:fe00:0001", FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	rep, err = Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	// hostconfig grades a name against the spec as an error, and cannot
	// place the missing VFs (the fixture has no sriov_offset): pf-present.
	want := []key{
		{SeverityError, finding.CheckGUIDMismatch, vf.PCI},
		{SeverityError, finding.CheckPFPresent, "0000:18:00.0"},
		{SeverityError, finding.CheckSRIOVNumVFs, "0000:18:00.0"}, // once: the doctor's
		{SeverityError, finding.CheckVFName, "0000:40:00.2"},
		{SeverityInfo, finding.CheckSpec, "node"},
		{SeverityInfo, finding.CheckVFAltName, "node"},
	}
	if diff := cmp.Diff(want, keys(t, rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
}

func TestSpecThatDoesNotResolve(t *testing.T) {
	n := dgxOnHost(t)
	spec, err := hostconfig.ParseSpec([]byte("linkType: infiniband\nvfs: 8\npfs:\n  - pci: 0000:77:00.0\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(Options{SysfsRoot: n.Root, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Subject == "0000:77:00.0" || f.Check == finding.CheckSpec {
			found = found || f.Severity == SeverityError
		}
	}
	if !found {
		t.Errorf("a spec naming a PF this node lacks gives no error:\n%s", text(t, rep))
	}
}
