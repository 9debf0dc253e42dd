package drift

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

const (
	pci     = "0000:18:00.2"
	netns   = "/var/run/netns/cni-5f1c0a2e"
	altName = "vf-0000-18-00.2"
	mac     = "00:00:10:49:fe:80:00:00:00:00:00:00:a2:88:c2:ff:fe:18:00:00"
	guid    = "a288:c2ff:fe18:0000"
)

func port(num, state, phys int) sysfs.Port {
	return sysfs.Port{Num: num, State: sysfs.PortState{Num: state, Name: stateName(state)},
		PhysState: sysfs.PhysState{Num: phys, Name: physName(phys)}, LinkLayer: "InfiniBand"}
}

func stateName(n int) string {
	s, _ := sysfs.ParsePortState(strconv.Itoa(n))
	return s.Name
}

func physName(n int) string {
	s, _ := sysfs.ParsePhysState(strconv.Itoa(n))
	return s.Name
}

func healthyRDMA() []rdma.Device {
	g, _ := sysfs.ParseGUID(guid)
	return []rdma.Device{{RDMADevice: sysfs.RDMADevice{Name: "mlx5_10", PCI: pci, NodeGUID: g, Ports: []sysfs.Port{port(1, 4, 5)}},
		Source: rdma.HostSysfs}}
}

// devs wraps devices as the host's sysfs shows them.
func devs(ds ...sysfs.RDMADevice) []rdma.Device {
	out := make([]rdma.Device, len(ds))
	for i, d := range ds {
		out[i] = rdma.Device{RDMADevice: d, Source: rdma.HostSysfs}
	}
	return out
}

func healthyExpect() Expect {
	return Expect{PCI: pci, Netns: netns, IfName: "net1", AltName: altName, MAC: mac, MTU: 4092,
		LinkLayer: "infiniband", NodeGUID: guid, PortPolicy: config.PolicyRequire}
}

func healthyObs() *Observation {
	return &Observation{Found: true, Name: "net1", AltNames: []string{"ibp24s0f0v0", altName}, MAC: mac, MTU: 4092,
		LinkLayer: "infiniband", Carrier: true, RDMA: healthyRDMA()}
}

func reasons(fs []Finding) []Reason {
	var out []Reason
	for _, f := range fs {
		out = append(out, f.Reason)
	}
	return out
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name     string
		exp      func(*Expect)
		obs      func(*Observation)
		want     []Reason
		contains []string // substrings the details must hold, in order of findings
	}{
		{"healthy", nil, nil, nil, nil},
		{"MAC differs only in case", nil, func(o *Observation) { o.MAC = strings.ToUpper(mac) }, nil, nil},
		{"missing", nil, func(o *Observation) { *o = Observation{Present: []string{"lo", "eth0", "net1"}} },
			[]Reason{Missing}, []string{pci + " is not in netns " + netns + " (it holds: lo, eth0, net1)"}},
		{"renamed", nil, func(o *Observation) { o.Name = "ibp24s0f0v0" },
			[]Reason{Renamed}, []string{"named ibp24s0f0v0, expected net1"}},
		{"altname missing", nil, func(o *Observation) { o.AltNames = []string{"ibp24s0f0v0"} },
			[]Reason{AltNameMissing}, []string{"lacks altname " + altName + " (has: ibp24s0f0v0)"}},
		{"altname missing, none at all", nil, func(o *Observation) { o.AltNames = nil },
			[]Reason{AltNameMissing}, []string{"lacks altname " + altName}},
		{"MAC changed", nil, func(o *Observation) { o.MAC = "02:00:00:00:00:01" },
			[]Reason{MAC}, []string{"MAC is 02:00:00:00:00:01, expected " + mac}},
		{"GUID changed", nil, func(o *Observation) { o.RDMA[0].NodeGUID = 0xa288c2fffe180001 },
			[]Reason{GUID}, []string{"node GUID is a288:c2ff:fe18:0001, expected " + guid}},
		{"GUID zeroed", nil, func(o *Observation) { o.RDMA[0].NodeGUID = 0 },
			[]Reason{GUID}, []string{"node GUID is 0000:0000:0000:0000"}},
		{"RDMA device gone", nil, func(o *Observation) {
			o.RDMA, o.Carrier = nil, true
			o.RDMALooked = []string{"host sysfs /sys/bus/pci/devices/" + pci + "/infiniband: empty"}
		}, []Reason{RDMAMissing}, []string{"its RDMA device is found nowhere (looked in: host sysfs /sys/bus/pci/devices/" + pci + "/infiniband: empty)"}},
		{"RDMA device gone, GUID not checked", func(e *Expect) { e.NodeGUID, e.RDMA = "", true },
			func(o *Observation) { o.RDMA, o.Carrier = nil, true }, []Reason{RDMAMissing}, nil},
		{"no RDMA device expected, none found", func(e *Expect) { e.NodeGUID, e.RDMA, e.LinkLayer = "", false, "ethernet" },
			func(o *Observation) { o.RDMA, o.Carrier, o.LinkLayer = nil, true, "ethernet" }, nil, nil},
		{"MTU changed", nil, func(o *Observation) { o.MTU = 2044 },
			[]Reason{MTU}, []string{"MTU is 2044, expected 4092"}},
		{"link layer fell back", nil, func(o *Observation) { o.LinkLayer = "ethernet" },
			[]Reason{LinkLayer}, []string{"link layer is ethernet, expected infiniband"}},
		{"port down", nil, func(o *Observation) { o.RDMA[0].Ports[0] = port(1, 1, 2) },
			[]Reason{PortDown}, []string{"mlx5_10 port 1 is 1: DOWN / 2: Polling, want 4: ACTIVE / 5: LinkUp"}},
		{"no carrier on a netdev VF", func(e *Expect) { e.NodeGUID = ""; e.LinkLayer = "ethernet" },
			func(o *Observation) { o.RDMA = nil; o.Carrier = false; o.LinkLayer = "ethernet" },
			[]Reason{PortDown}, []string{"net1 has no carrier"}},
		{"all at once", nil, func(o *Observation) {
			o.Name, o.AltNames, o.MAC, o.MTU, o.LinkLayer = "dev7", nil, "02:00:00:00:00:01", 1500, "ethernet"
			o.RDMA[0].NodeGUID = 1
			o.RDMA[0].Ports[0] = port(1, 2, 4)
		}, []Reason{Renamed, AltNameMissing, MAC, GUID, MTU, LinkLayer, PortDown}, nil},
		{"missing hides everything else", nil, func(o *Observation) {
			*o = Observation{Name: "dev7", MAC: "x", MTU: 1, LinkLayer: "ethernet"}
		}, []Reason{Missing}, []string{"(it holds: )"}},

		// No expectation, no finding.
		{"no expectations", func(e *Expect) { *e = Expect{PCI: pci, Netns: netns, IfName: "net1", PortPolicy: config.PolicyIgnore} },
			func(o *Observation) {
				o.AltNames, o.MAC, o.MTU, o.LinkLayer, o.Carrier = nil, "x", 1, "ethernet", false
				o.RDMA[0].Ports[0] = port(1, 1, 1)
				o.RDMA[0].NodeGUID = 0
			}, nil, nil},
		{"port not checked", func(e *Expect) { e.PortPolicy = config.PolicyIgnore },
			func(o *Observation) { o.RDMA[0].Ports[0] = port(1, 1, 3) }, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp, obs := healthyExpect(), healthyObs()
			if tc.exp != nil {
				tc.exp(&exp)
			}
			if tc.obs != nil {
				tc.obs(obs)
			}
			got := Compare(exp, obs)
			if diff := cmp.Diff(tc.want, reasons(got)); diff != "" {
				t.Fatalf("reasons (-want +got):\n%s\nfindings: %v", diff, got)
			}
			for i, sub := range tc.contains {
				if !strings.Contains(got[i].Detail, sub) {
					t.Errorf("finding %d %q does not contain %q", i, got[i].Detail, sub)
				}
			}
			for _, f := range got {
				if f.Reason != Missing && !strings.Contains(f.Detail, pci) {
					t.Errorf("finding %q does not name the VF", f)
				}
				if strings.Contains(f.Detail, "\n") {
					t.Errorf("finding %q spans lines; CHECK prints one per line", f)
				}
			}
		})
	}
}

// TestCompareOrderStable checks findings come in Reasons order however
// often Compare runs (CHECK output and metrics must not flap).
func TestCompareOrderStable(t *testing.T) {
	exp := healthyExpect()
	obs := healthyObs()
	obs.Name, obs.AltNames, obs.MAC, obs.MTU, obs.LinkLayer = "dev7", nil, "02:00:00:00:00:01", 1500, "ethernet"
	obs.RDMA[0].NodeGUID = 1
	obs.RDMA[0].Ports[0] = port(1, 1, 3)
	first := Compare(exp, obs)
	want := slices.DeleteFunc(slices.Clone(Reasons), func(r Reason) bool { return r == Missing || r == RDMAMissing })
	if diff := cmp.Diff(want, reasons(first)); diff != "" {
		t.Fatalf("reasons not in Reasons order (-want +got):\n%s", diff)
	}
	for range 50 {
		if diff := cmp.Diff(first, Compare(exp, obs)); diff != "" {
			t.Fatalf("Compare is not stable (-first +now):\n%s", diff)
		}
	}
}

func TestPortProblem(t *testing.T) {
	type tc struct {
		name    string
		obs     Observation
		problem string // "" = none; else a substring of the explanation
	}
	var tests []tc
	for s := 1; s <= 5; s++ {
		if s == sysfs.PortActive {
			continue
		}
		tests = append(tests, tc{"state " + stateName(s), Observation{Name: "net1", Carrier: true,
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{port(1, s, 5)}})},
			"mlx5_10 port 1 is " + strconv.Itoa(s) + ": " + stateName(s) + " / 5: LinkUp, want 4: ACTIVE / 5: LinkUp"})
	}
	for p := 1; p <= 7; p++ {
		if p == sysfs.PhysLinkUp {
			continue
		}
		tests = append(tests, tc{"phys " + physName(p), Observation{Name: "net1", Carrier: true,
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{port(1, 4, p)}})},
			"mlx5_10 port 1 is 4: ACTIVE / " + strconv.Itoa(p) + ": " + physName(p)})
	}
	tests = append(tests,
		tc{"active", Observation{Name: "net1", RDMA: healthyRDMA()}, ""},
		tc{"RDMA port wins over missing carrier", Observation{Name: "net1", Carrier: false, RDMA: healthyRDMA()}, ""},
		tc{"RDMA port down despite carrier", Observation{Name: "net1", Carrier: true,
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{port(1, 1, 3)}})}, "port 1 is 1: DOWN / 3: Disabled"},
		tc{"second port down", Observation{Name: "net1",
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{port(1, 4, 5), port(2, 2, 4)}})},
			"mlx5_10 port 2 is 2: INIT / 4: PortConfigurationTraining"},
		tc{"second device down", Observation{Name: "net1",
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{port(1, 4, 5)}}, sysfs.RDMADevice{Name: "mlx5_11", Ports: []sysfs.Port{port(1, 3, 5)}})}, "mlx5_11 port 1 is 3: ARMED"},
		tc{"unknown state number", Observation{Name: "net1",
			RDMA: devs(sysfs.RDMADevice{Name: "mlx5_10", Ports: []sysfs.Port{{Num: 1, State: sysfs.PortState{Num: 9, Name: "X"},
				PhysState: sysfs.PhysState{Num: 5, Name: "LinkUp"}}}})}, "port 1 is 9: X"},
		tc{"netdev with carrier", Observation{Name: "net1", Carrier: true}, ""},
		tc{"netdev without carrier", Observation{Name: "net1"}, "net1 has no carrier"},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.obs.PortProblem()
			if (got == "") != (tc.problem == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("PortProblem() = %q, want %q", got, tc.problem)
			}
		})
	}
}

// portPolicy means one thing wherever drift is compared: require makes a
// port that cannot pass traffic a drift, warn a drift marked Warn (told,
// not failed on), ignore nothing; "" is require, the configuration's
// default (records of earlier releases).
func TestPortPolicy(t *testing.T) {
	down := func(o *Observation) { o.RDMA[0].Ports[0] = port(1, 1, 2) }
	for policy, want := range map[config.Policy][]Finding{
		"":                   {{Reason: PortDown, Detail: "VF " + pci + ": mlx5_10 port 1 is 1: DOWN / 2: Polling, want 4: ACTIVE / 5: LinkUp"}},
		config.PolicyRequire: {{Reason: PortDown, Detail: "VF " + pci + ": mlx5_10 port 1 is 1: DOWN / 2: Polling, want 4: ACTIVE / 5: LinkUp"}},
		config.PolicyWarn:    {{Reason: PortDown, Detail: "VF " + pci + ": mlx5_10 port 1 is 1: DOWN / 2: Polling, want 4: ACTIVE / 5: LinkUp", Warn: true}},
		config.PolicyIgnore:  nil,
	} {
		exp, obs := healthyExpect(), healthyObs()
		exp.PortPolicy = policy
		down(obs)
		if diff := cmp.Diff(want, Compare(exp, obs)); diff != "" {
			t.Errorf("portPolicy %q (-want +got):\n%s", policy, diff)
		}
	}
}

func TestFromRecord(t *testing.T) {
	rec := &state.Record{Network: "ib-net", ContainerID: "c", IfName: "net1", Netns: netns, PCI: pci,
		AltName: altName, MAC: mac, MTU: 4092, LinkLayer: "infiniband", NodeGUID: guid}
	for _, policy := range []string{"require", "warn", "ignore"} {
		rec.PortPolicy = policy
		want := Expect{PCI: pci, Netns: netns, IfName: "net1", AltName: altName, MAC: mac, MTU: 4092,
			LinkLayer: "infiniband", NodeGUID: guid, PortPolicy: config.Policy(policy)}
		if diff := cmp.Diff(want, FromRecord(rec)); diff != "" {
			t.Errorf("portPolicy %s (-want +got):\n%s", policy, diff)
		}
	}
	// An RDMA device is expected when ADD found one and GUIDs are checked.
	rec.PF, rec.RDMA, rec.PortPolicy = "0000:18:00.0", []string{"mlx5_10"}, "require"
	for policy, expect := range map[string]bool{"require": true, "warn": true, "ignore": false} {
		rec.GUIDPolicy = policy
		want := Expect{PCI: pci, PF: "0000:18:00.0", Netns: netns, IfName: "net1", AltName: altName, MAC: mac, MTU: 4092,
			LinkLayer: "infiniband", NodeGUID: guid, RDMA: expect, PortPolicy: config.PolicyRequire}
		if diff := cmp.Diff(want, FromRecord(rec)); diff != "" {
			t.Errorf("guidPolicy %s (-want +got):\n%s", policy, diff)
		}
	}
}

func TestObserveLink(t *testing.T) {
	hw, _ := net.ParseMAC(mac)
	ib := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "net1", AltNames: []string{altName}, HardwareAddr: hw,
		MTU: 4092, EncapType: "infiniband", RawFlags: unix.IFF_UP | unix.IFF_LOWER_UP}}
	eth := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "net1", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1},
		MTU: 1500, EncapType: "ether", RawFlags: unix.IFF_UP}}
	ethPort := healthyRDMA()
	ethPort[0].Ports[0].LinkLayer = "Ethernet"
	tests := []struct {
		name string
		link netlink.Link
		rdma []rdma.Device
		want Observation
	}{
		{"IPoIB with RDMA", ib, healthyRDMA(), Observation{Found: true, Name: "net1", AltNames: []string{altName}, MAC: mac,
			MTU: 4092, LinkLayer: "infiniband", Carrier: true, RDMA: healthyRDMA()}},
		{"netdev without RDMA", eth, nil, Observation{Found: true, Name: "net1", MAC: "02:00:00:00:00:01", MTU: 1500,
			LinkLayer: "ethernet"}},
		// The HCA port is the authority: an IPoIB netdev whose port fell back
		// to Ethernet reports ethernet.
		{"RDMA port link layer wins", ib, ethPort, Observation{Found: true, Name: "net1", AltNames: []string{altName}, MAC: mac,
			MTU: 4092, LinkLayer: "ethernet", Carrier: true, RDMA: ethPort}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(&tc.want, ObserveLink(tc.link, tc.rdma)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeGUID(t *testing.T) {
	if got := (&Observation{}).NodeGUID(); got != "" {
		t.Errorf("NodeGUID without RDMA = %q, want empty", got)
	}
	o := &Observation{RDMA: append(healthyRDMA(), devs(sysfs.RDMADevice{Name: "mlx5_11", NodeGUID: 7})...)}
	if got := o.NodeGUID(); got != guid {
		t.Errorf("NodeGUID = %q, want the first device's %s", got, guid)
	}
}

func TestFindingString(t *testing.T) {
	f := Finding{Reason: MTU, Detail: "VF x MTU is 1, expected 2"}
	if got := f.String(); got != "mtu: VF x MTU is 1, expected 2" {
		t.Errorf("String() = %q", got)
	}
}
