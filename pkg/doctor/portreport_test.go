package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

func portErrors(fs []finding.Finding) []string {
	out := []string{}
	for _, f := range fs {
		if f.Severity == finding.Error && (f.Check == finding.CheckPortState || f.Check == finding.CheckLinkLayer) {
			out = append(out, f.Check+" "+f.Subject)
		}
	}
	return out
}

// Ports finds what a full run's port checks find, and a full report
// takes a newer port report's word for the functions it covers, never an
// older one's; its other findings stay.
func TestPortsAndWithPorts(t *testing.T) {
	n := sysfstest.NewDGXH200(t)
	opts := Options{SysfsRoot: n.Root, LinkLayer: config.LinkLayerInfiniBand}
	down := n.PFs[0].VFs[1]
	n.SetPort(down.PCI, down.RDMA, 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled", GID0: sysfstest.GID0(down.PortGUID)})
	zero := n.PFs[1].VFs[2]
	n.SetRDMA(zero.PCI, sysfstest.RDMA{Name: zero.RDMA, NodeGUID: "0000:0000:0000:0000", FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(zero.PortGUID)}}})

	started := time.Now()
	full, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := Ports(opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(portErrors(full.Findings), portErrors(ports.Findings)); diff != "" {
		t.Errorf("port checks alone vs the full run (-full +ports):\n%s", diff)
	}
	if diff := cmp.Diff([]string{finding.CheckPortState + " " + down.PCI}, portErrors(ports.Findings)); diff != "" {
		t.Errorf("port errors (-want +got):\n%s", diff)
	}

	// The port comes back; a port report begun after the full run wins.
	n.SetPort(down.PCI, down.RDMA, 1, sysfstest.Port{GID0: sysfstest.GID0(down.PortGUID)})
	fixed, err := Ports(opts)
	if err != nil {
		t.Fatal(err)
	}
	merged := full.WithPorts(started, fixed)
	if got := portErrors(merged.Findings); len(got) != 0 {
		t.Errorf("merged with a newer port report, port errors %v remain", got)
	}
	guid := func(fs []finding.Finding) bool {
		for _, f := range fs {
			if f.Check == finding.CheckGUIDInvalid && f.Subject == zero.PCI && f.Severity == finding.Error {
				return true
			}
		}
		return false
	}
	if !guid(full.Findings) || !guid(merged.Findings) {
		t.Errorf("the zero GUID finding: in the full report %v, in the merged one %v; want both", guid(full.Findings), guid(merged.Findings))
	}
	if diff := cmp.Diff([]string{finding.CheckPortState + " " + down.PCI}, portErrors(full.Findings)); diff != "" {
		t.Errorf("WithPorts changed the report it was called on (-want +got):\n%s", diff)
	}
	// A port report older than the full run is not taken.
	if got := full.WithPorts(time.Now(), fixed); got != full {
		t.Error("a port report begun before the full run replaced its findings")
	}
}

// The port checks cover every vendor's RDMA functions (the lab's igb VFs
// with the test InfiniBand provider, a RoCE NIC of another vendor), and
// nothing else of the doctor's does: a VF of another vendor whose port is
// down is a port-state finding, its PF's Ethernet-only sibling without an
// RDMA device is no function of the report, and no Mellanox-only check
// (driver, firmware, names) speaks of them.
func TestPortsOfOtherVendors(t *testing.T) {
	tree := sysfstest.New(t)
	const pf, vf, plain = "0000:01:00.0", "0000:01:10.0", "0000:01:10.2"
	igb := func(r *sysfstest.RDMA) sysfstest.Device {
		return sysfstest.Device{Vendor: "0x8086", DeviceID: "0x10ca", Driver: "igbvf", RDMA: r}
	}
	tree.AddPF(pf, 7, sysfstest.Device{Vendor: "0x8086", DeviceID: "0x10c9", Driver: "igb",
		RDMA: &sysfstest.RDMA{Name: "sst_ib0", NodeGUID: "0002:c903:0000:0001"}})
	tree.AddVF(pf, 0, vf, igb(&sysfstest.RDMA{Name: "sst_ib1", NodeGUID: "0002:c903:0000:0002",
		Ports: []sysfstest.Port{{State: "1: DOWN", PhysState: "3: Disabled"}}}))
	tree.AddVF(pf, 1, plain, igb(nil))
	opts := Options{SysfsRoot: tree.Root}

	ports, err := Ports(opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{finding.CheckPortState + " " + vf}, portErrors(ports.Findings)); diff != "" {
		t.Errorf("port errors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{pf, vf}, ports.Functions); diff != "" {
		t.Errorf("functions of the port report (-want +got):\n%s", diff)
	}
	for _, f := range ports.Findings {
		if strings.Contains(f.Remedy, "mlx") || !strings.Contains(f.Remedy, "ibstat sst_ib1") {
			t.Errorf("the remedy for another vendor's port names Mellanox tools or not ibstat sst_ib1: %s", f.Remedy)
		}
	}
	full, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range full.Findings {
		if f.Severity != finding.Info && f.Check != finding.CheckPortState {
			t.Errorf("a check other than the port checks speaks of another vendor's function: %+v", f)
		}
	}
	if diff := cmp.Diff(portErrors(ports.Findings), portErrors(full.Findings)); diff != "" {
		t.Errorf("port checks alone vs the full run (-ports +full):\n%s", diff)
	}
}
