package doctor

import (
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
