package hostconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// healthyDGX is a DGX H200 as the unit leaves it: 64 VFs named, with
// altnames and derived GUIDs.
func healthyDGX(t *testing.T) (*kernel, *Plan) {
	t.Helper()
	k := newDGXBoot(t)
	p := mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root())
	bringUp(t, k, p)
	return k, p
}

func TestCheckHealthy(t *testing.T) {
	t.Parallel()
	k, p := healthyDGX(t)
	for _, c := range []Checker{{SysfsRoot: k.root(), AltNames: k.altNamesOf}, {SysfsRoot: k.root()}} {
		findings, err := c.Check(p.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if len(findings) != 0 {
			t.Errorf("healthy node, altnames checked %v: %d findings:\n%s", c.AltNames != nil, len(findings), findingsText(findings))
		}
	}
}

func findingsText(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintln(&b, f)
	}
	return b.String()
}

// checkSpec selects two PFs of the DGX fixture, to keep each case's node
// small: 0000:18:00.1 ({pfidx} 0, VFs 18:02.2-18:03.1, ib0v*) and
// 0000:40:00.0 ({pfidx} 1, VFs 40:00.2-40:01.1, ib1v*).
const checkSpec = "linkType: infiniband\nvfs: 8\npfs:\n  - pci: 0000:18:00.1\n  - pci: 0000:40:00.0\n"

// TestCheckFindings breaks a healthy node one way at a time and expects
// exactly the findings that name it: severity, check, subject and message.
func TestCheckFindings(t *testing.T) {
	type want struct {
		sev     Severity
		check   string
		subject string
		message string
	}
	vf := func(p *Plan, pf, i int) VFPlan { return p.PFs[pf].VFs[i] }
	cases := []struct {
		name    string
		spec    string // "" = checkSpec
		breakIt func(t *testing.T, k *kernel, p *Plan)
		want    []want
	}{
		{
			name: "VFs not created",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.locked(func() {
					k.tree.WriteFile(filepath.Join(k.tree.DevicePath("0000:40:00.0"), "sriov_numvfs"), "0")
					k.setNumVFs(k.pf("0000:40:00.0"), 0)
				})
			},
			want: []want{{SeverityError, finding.CheckSRIOVNumVFs, "0000:40:00.0", "has 0 VFs, the spec wants 8"}},
		},
		{
			name: "VF renamed by someone else",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.tree.RenameNetDev(vf(p, 1, 2).PCI, "ib1v2", "ibp64s0f0v2")
			},
			want: []want{{SeverityError, finding.CheckVFName, "0000:40:00.4", "netdev is ibp64s0f0v2, the spec wants ib1v2"}},
		},
		{
			name: "altname missing",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				if err := os.Remove(filepath.Join(k.state, "alt", vf(p, 0, 7).AltName)); err != nil {
					t.Fatal(err)
				}
			},
			want: []want{{SeverityError, finding.CheckVFAltName, "0000:18:03.1", "ib0v7 lacks altname vf-0000-18-03.1"}},
		},
		{
			name: "VF in a pod",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.tree.RemoveNetDev(vf(p, 0, 0).PCI, "ib0v0")
			},
			want: []want{{SeverityInfo, finding.CheckVFName, "0000:18:02.2", "no netdev on the host"}},
		},
		{
			name: "zero node GUID",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.setVFGUIDs(vf(p, 1, 4).PCI, VFGUIDs{})
			},
			want: []want{
				{SeverityError, finding.CheckGUIDInvalid, "0000:40:00.6", "node GUID is 00:00:00:00:00:00:00:00 (unset), want ba:3f:d2:00:04:5a:1c:88"},
				{SeverityInfo, finding.CheckGUIDInvalid, "0000:40:00.6", "port GUID not reported yet"},
			},
		},
		{
			name: "GUIDs from another scheme",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.setVFGUIDs(vf(p, 0, 1).PCI, VFGUIDs{Node: 0xa288c2fffe180101, Port: 0xa288c2fffe180102})
			},
			want: []want{
				{SeverityError, finding.CheckGUIDMismatch, "0000:18:02.3", "node GUID is a2:88:c2:ff:fe:18:01:01, want ba:3f:d2:00:01:5a:1b:21"},
				{SeverityError, finding.CheckGUIDMismatch, "0000:18:02.3", "port GUID is a2:88:c2:ff:fe:18:01:02, want ba:3f:d2:80:01:5a:1b:21"},
			},
		},
		{
			name: "duplicate GUIDs",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				pfGUID, _ := node{root: k.root()}.pfGUID(p.PFs[1].PCI)
				g, _ := DeriveVFGUIDs(pfGUID, 6)
				k.setVFGUIDs(vf(p, 0, 0).PCI, g)
			},
			want: []want{
				{SeverityError, finding.CheckGUIDMismatch, "0000:18:02.2", "node GUID is ba:3f:d2:00:06:5a:1c:88, want ba:3f:d2:00:00:5a:1b:21"},
				{SeverityError, finding.CheckGUIDMismatch, "0000:18:02.2", "port GUID is ba:3f:d2:80:06:5a:1c:88, want ba:3f:d2:80:00:5a:1b:21"},
				{SeverityError, finding.CheckGUIDDuplicate, "0000:18:02.2", "node GUID ba:3f:d2:00:06:5a:1c:88 is shared by 0000:18:02.2, 0000:40:01.0"},
			},
		},
		{
			name: "InfiniBand fell back to Ethernet",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.tree.SetPort("0000:40:00.0", "mlx5_2", 1, sysfstest.Port{LinkLayer: "Ethernet"})
			},
			want: []want{{SeverityError, finding.CheckLinkLayer, "0000:40:00.0", "port 1 runs ethernet, the spec wants infiniband"}},
		},
		{
			name: "PF GUID locally administered",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.tree.SetRDMA("0000:18:00.1", sysfstest.RDMA{Name: "mlx5_1", NodeGUID: "ba3f:d203:005a:1b21",
					Ports: []sysfstest.Port{{GID0: sysfstest.GID0("ba3f:d203:005a:1b21")}}})
			},
			want: []want{{SeverityError, finding.CheckGUIDUnderivable, "0000:18:00.1", "ba:3f:d2:03:00:5a:1b:21 is locally administered"}},
		},
		{
			name: "VF without a driver",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				k.locked(func() { k.unbindVF(vf(p, 1, 3).PCI) })
			},
			want: []want{{SeverityError, finding.CheckDriverBound, "0000:40:00.5", "no driver is bound"}},
		},
		{
			name: "VF gone from its PF",
			breakIt: func(t *testing.T, k *kernel, p *Plan) {
				if err := os.Remove(filepath.Join(k.tree.DevicePath("0000:18:00.1"), "virtfn3")); err != nil {
					t.Fatal(err)
				}
			},
			want: []want{{SeverityError, finding.CheckVFAddress, "0000:18:02.5", "VF 3 of PF 0000:18:00.1 is missing (no virtfn3)"}},
		},
		{
			name: "PF absent",
			spec: "linkType: infiniband\nvfs: 8\npfs:\n  - pci: 0000:18:00.1\n  - {pci: 0000:5e:00.0, vfOffset: 2, vfStride: 1}\n",
			want: []want{{SeverityError, finding.CheckPFPresent, "0000:5e:00.0", "no such PCI device under"}},
		},
		{
			name: "PF absent, addresses unknown",
			spec: "linkType: infiniband\nvfs: 8\npfs:\n  - pci: 0000:18:00.1\n  - pci: 0000:5e:00.0\n",
			want: []want{{SeverityError, finding.CheckPFPresent, "0000:5e:00.0", "no such PCI device under"}},
		},
		{
			name: "not SR-IOV capable",
			spec: "linkType: infiniband\nvfs: 8\npfs:\n  - pci: 0000:18:00.1\n  - pci: 0000:43:00.0\n",
			want: []want{{SeverityError, finding.CheckPFPresent, "0000:43:00.0", "not SR-IOV capable"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newDGXBoot(t)
			p := mustResolve(t, mustParse(t, checkSpec), k.root())
			bringUp(t, k, p)
			spec := p.Spec
			if tc.spec != "" {
				spec = mustParse(t, tc.spec)
			}
			if tc.breakIt != nil {
				tc.breakIt(t, k, p)
			}
			findings, err := Checker{SysfsRoot: k.root(), AltNames: k.altNamesOf}.Check(spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				found := false
				for _, f := range findings {
					if f.Severity == w.sev && f.Check == w.check && f.Subject == w.subject && strings.Contains(f.Message, w.message) {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s %s finding for %s with %q in:\n%s", w.sev, w.check, w.subject, w.message, findingsText(findings))
				}
			}
			if len(findings) != len(tc.want) {
				t.Errorf("%d findings, want %d:\n%s", len(findings), len(tc.want), findingsText(findings))
			}
			for _, f := range findings {
				if !slices.Contains(Checks, f.Check) {
					t.Errorf("finding of check %q, which Checks does not list: %s", f.Check, f)
				}
			}
			for i := 1; i < len(findings); i++ {
				if findings[i-1].Severity.Rank() > findings[i].Severity.Rank() {
					t.Errorf("findings not sorted by severity:\n%s", findingsText(findings))
				}
			}
			if HasErrors(findings) != (tc.want[0].sev == SeverityError) {
				t.Errorf("HasErrors = %v", HasErrors(findings))
			}
		})
	}
}

// Checks lists registered checks alone, each once.
func TestChecksRegistered(t *testing.T) {
	for i, c := range Checks {
		if _, ok := finding.Lookup(c); !ok {
			t.Errorf("check %q is not in package finding's registry", c)
		}
		if slices.Index(Checks, c) != i {
			t.Errorf("check %q is listed twice", c)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	spec := readSpec(t, "dgx-h200.yaml")
	if _, err := Check(spec, filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "is not readable") {
		t.Errorf("missing sysfs root: %v", err)
	}
	igb := newIGBBoot(t)
	if _, err := Check(spec, igb.root()); err == nil || !strings.Contains(err.Error(), "found no SR-IOV capable PF") {
		t.Errorf("match on a node without ConnectX-7: %v", err)
	}
}

// HostAltNames reads altnames over netlink in the calling thread's network
// namespace: here a private one holding a veth pair, one end with an altname.
func TestHostAltNames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a link with an altname in a private network namespace (CI runs as root and must not skip this)")
	}
	netns, err := ns.TempNetNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() { netns.Close() })
	const alt = "sriov-0000:18:00.2"
	err = netns.Do(func(ns.NetNS) error {
		link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ib0v0"}, PeerName: "peer0"}
		if err := netlink.LinkAdd(link); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		if err := netlink.LinkAddAltName(link, alt); err != nil {
			return fmt.Errorf("add altname: %w", err)
		}
		if got, err := HostAltNames("ib0v0"); err != nil || !slices.Equal(got, []string{alt}) {
			t.Errorf("HostAltNames(ib0v0) = %v, %v; want [%s]", got, err, alt)
		}
		if got, err := HostAltNames("ib0v1"); err == nil || !strings.Contains(err.Error(), "look up link ib0v1") {
			t.Errorf("HostAltNames(ib0v1) = %v, %v; want an error naming the link", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
