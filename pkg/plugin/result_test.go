package plugin

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/google/go-cmp/cmp"
)

const (
	podNetns   = "/var/run/netns/cni-5f1c0a2e"
	otherNetns = "/var/run/netns/cni-0badc0de"
	vfPCI      = "0000:18:00.2"
	// IPoIB hardware addresses are 20 bytes; the last 8 are the port GUID.
	ipoibMAC   = "00:00:10:49:fe:80:00:00:00:00:00:00:a2:88:c2:ff:fe:18:00:00"
	ipoibMACUp = "00:00:10:49:FE:80:00:00:00:00:00:00:A2:88:C2:FF:FE:18:00:00"
	otherMAC   = "02:00:00:00:00:01"
)

var cniVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// prevIface and prevIP describe a prevResult the way a plugin before us
// (host-device, sriov-cni, ib-sriov-cni) prints it.
type prevIface struct {
	Name, Mac, Sandbox, PciID string
	Mtu                       int
}

type prevIP struct {
	Iface   *int // nil = no interface index, as IPAM-only results have
	Address string
}

func idx(i int) *int { return &i }

// prevResultJSON renders a result in the wire format of version v: IPs
// carry "version" before 1.0.0, and only 1.1.0 knows mtu and pciID (a
// plugin printing an older version never writes them).
func prevResultJSON(t *testing.T, v string, ifaces []prevIface, ips []prevIP) []byte {
	t.Helper()
	var ifs []map[string]any
	for _, i := range ifaces {
		m := map[string]any{"name": i.Name}
		if i.Mac != "" {
			m["mac"] = i.Mac
		}
		if i.Sandbox != "" {
			m["sandbox"] = i.Sandbox
		}
		if v == "1.1.0" {
			if i.Mtu != 0 {
				m["mtu"] = i.Mtu
			}
			if i.PciID != "" {
				m["pciID"] = i.PciID
			}
		}
		ifs = append(ifs, m)
	}
	var addrs []map[string]any
	for _, ip := range ips {
		m := map[string]any{"address": ip.Address}
		if ip.Iface != nil {
			m["interface"] = *ip.Iface
		}
		if v < "1.0.0" {
			m["version"] = "4"
		}
		addrs = append(addrs, m)
	}
	out := map[string]any{"cniVersion": v, "interfaces": ifs, "ips": addrs,
		"dns": map[string]any{"nameservers": []string{"10.96.0.10"}}}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parsePrev reads a prevResult as the plugin does: the version's own
// result type, then converted to the current one.
func parsePrev(t *testing.T, v string, data []byte) *current.Result {
	t.Helper()
	r, err := version.NewResult(v, data)
	if err != nil {
		t.Fatalf("version.NewResult(%s): %v\n%s", v, err, data)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("NewResultFromResult(%s): %v", v, err)
	}
	return res
}

func ifacesOf(res *current.Result) []current.Interface {
	var out []current.Interface
	for _, i := range res.Interfaces {
		out = append(out, *i)
	}
	return out
}

// ipIndexes lists each IP's interface index (-1 for none).
func ipIndexes(res *current.Result) []int {
	var out []int
	for _, ip := range res.IPs {
		if ip.Interface == nil {
			out = append(out, -1)
		} else {
			out = append(out, *ip.Interface)
		}
	}
	return out
}

func TestCorrectResult(t *testing.T) {
	want := current.Interface{Name: "net1", Mac: ipoibMAC, Mtu: 4092, Sandbox: podNetns, PciID: vfPCI}
	tests := []struct {
		name       string
		minVersion string // prevResults that cannot express the case are skipped
		ifaces     []prevIface
		ips        []prevIP
		wantIfaces []current.Interface
	}{
		{
			name:       "host-device entry corrected in place",
			ifaces:     []prevIface{{Name: "net1", Mac: otherMAC, Sandbox: podNetns}},
			ips:        []prevIP{{idx(0), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "matched by MAC after udev renamed the VF",
			ifaces:     []prevIface{{Name: "ibp24s0f0v0", Mac: ipoibMAC, Sandbox: podNetns}},
			ips:        []prevIP{{idx(0), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "matched by MAC in another case",
			ifaces:     []prevIface{{Name: "dev9", Mac: ipoibMACUp, Sandbox: podNetns}},
			ips:        []prevIP{{idx(0), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "matched by name, no sandbox given",
			ifaces:     []prevIface{{Name: "net1", Mac: otherMAC}},
			ips:        []prevIP{{idx(0), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "matched by pciID whatever the name and MAC",
			minVersion: "1.1.0",
			ifaces:     []prevIface{{Name: "dev7", Mac: otherMAC, Sandbox: podNetns, PciID: vfPCI, Mtu: 2044}},
			ips:        []prevIP{{idx(0), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "pciID match beats an earlier name match",
			minVersion: "1.1.0",
			ifaces: []prevIface{
				{Name: "net1", Mac: otherMAC, Sandbox: podNetns, PciID: "0000:18:00.3"},
				{Name: "dev7", Mac: "02:00:00:00:00:07", Sandbox: podNetns, PciID: vfPCI},
			},
			ips: []prevIP{{idx(1), "10.56.0.5/16"}},
			wantIfaces: []current.Interface{
				{Name: "net1", Mac: otherMAC, Sandbox: podNetns, PciID: "0000:18:00.3"},
				want,
			},
		},
		{
			name: "missing entry appended, IP indexes still point at their interfaces",
			ifaces: []prevIface{
				{Name: "cni0", Mac: "02:00:00:00:00:aa"},
				{Name: "veth1234", Mac: "02:00:00:00:00:bb"},
				{Name: "eth0", Mac: "02:00:00:00:00:cc", Sandbox: podNetns},
			},
			ips: []prevIP{{idx(2), "10.244.0.5/24"}, {idx(0), "10.244.0.1/24"}},
			wantIfaces: []current.Interface{
				{Name: "cni0", Mac: "02:00:00:00:00:aa"},
				{Name: "veth1234", Mac: "02:00:00:00:00:bb"},
				{Name: "eth0", Mac: "02:00:00:00:00:cc", Sandbox: podNetns},
				want,
			},
		},
		{
			name:       "no interfaces at all (IPAM-only result)",
			ips:        []prevIP{{nil, "10.56.0.5/16"}},
			wantIfaces: []current.Interface{want},
		},
		{
			name:       "empty result",
			wantIfaces: []current.Interface{want},
		},
		{
			name:   "same name in another sandbox is not ours",
			ifaces: []prevIface{{Name: "net1", Mac: otherMAC, Sandbox: otherNetns}},
			ips:    []prevIP{{idx(0), "10.56.0.9/16"}},
			wantIfaces: []current.Interface{
				{Name: "net1", Mac: otherMAC, Sandbox: otherNetns},
				want,
			},
		},
		{
			name:   "same MAC in another sandbox is not ours",
			ifaces: []prevIface{{Name: "net7", Mac: ipoibMAC, Sandbox: otherNetns}},
			wantIfaces: []current.Interface{
				{Name: "net7", Mac: ipoibMAC, Sandbox: otherNetns},
				want,
			},
		},
		{
			name:       "same pciID in another sandbox is not ours",
			minVersion: "1.1.0",
			ifaces:     []prevIface{{Name: "net3", Mac: otherMAC, Sandbox: otherNetns, PciID: vfPCI}},
			wantIfaces: []current.Interface{
				{Name: "net3", Mac: otherMAC, Sandbox: otherNetns, PciID: vfPCI},
				want,
			},
		},
	}
	for _, tc := range tests {
		for _, v := range cniVersions {
			if v < tc.minVersion {
				continue
			}
			t.Run(tc.name+"/"+v, func(t *testing.T) {
				data := prevResultJSON(t, v, tc.ifaces, tc.ips)
				prev := parsePrev(t, v, data)
				before := ifacesOf(prev)
				beforeIPs := ipIndexes(prev)

				res := correctResult(prev, want)

				if diff := cmp.Diff(tc.wantIfaces, ifacesOf(res)); diff != "" {
					t.Errorf("interfaces (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(beforeIPs, ipIndexes(res)); diff != "" {
					t.Errorf("IP interface indexes changed (-before +after):\n%s", diff)
				}
				for _, i := range ipIndexes(res) {
					if i >= len(res.Interfaces) {
						t.Errorf("IP interface index %d out of range (%d interfaces)", i, len(res.Interfaces))
					}
				}
				if diff := cmp.Diff(before, ifacesOf(prev)); diff != "" {
					t.Errorf("correctResult modified prevResult (-before +after):\n%s", diff)
				}
				if len(res.DNS.Nameservers) != 1 {
					t.Errorf("DNS lost: %+v", res.DNS)
				}
				checkPrinted(t, res, want)
			})
		}
	}
}

// checkPrinted converts the corrected result to every version a config
// may ask for, as types.PrintResult does, and reads it back as a runtime
// would: no error, our entry intact, each IP still pointing at the same
// interface, and mtu/pciID only where the version has them.
func checkPrinted(t *testing.T, res *current.Result, want current.Interface) {
	t.Helper()
	for _, v := range cniVersions {
		conv, err := res.GetAsVersion(v)
		if err != nil {
			t.Errorf("GetAsVersion(%s): %v", v, err)
			continue
		}
		data, err := json.Marshal(conv)
		if err != nil {
			t.Errorf("marshal %s: %v", v, err)
			continue
		}
		if _, err := version.NewResult(v, data); err != nil {
			t.Errorf("printed %s result does not parse back: %v\n%s", v, err, data)
		}
		var wire struct {
			CNIVersion string           `json:"cniVersion"`
			Interfaces []map[string]any `json:"interfaces"`
			IPs        []struct {
				Interface *int `json:"interface"`
			} `json:"ips"`
		}
		if err := json.Unmarshal(data, &wire); err != nil {
			t.Fatalf("decode printed %s: %v", v, err)
		}
		if wire.CNIVersion != v {
			t.Errorf("printed cniVersion %q, want %q", wire.CNIVersion, v)
		}
		i := slices.IndexFunc(res.Interfaces, func(c *current.Interface) bool { return *c == want })
		if i < 0 || len(wire.Interfaces) != len(res.Interfaces) {
			t.Errorf("printed %s result has %d interfaces, corrected %d, ours at %d:\n%s",
				v, len(wire.Interfaces), len(res.Interfaces), i, data)
			continue
		}
		ours := wire.Interfaces[i]
		if ours["name"] != want.Name || ours["sandbox"] != want.Sandbox || ours["mac"] != want.Mac {
			t.Errorf("printed %s: our entry is %v, want name %s, sandbox %s, mac %s", v, ours, want.Name, want.Sandbox, want.Mac)
		}
		_, hasPCI := ours["pciID"]
		_, hasMTU := ours["mtu"]
		switch {
		case v < "1.0.0" && (hasPCI || hasMTU):
			t.Errorf("printed %s keeps fields the version lacks: %v", v, ours)
		case v == "1.1.0" && (ours["pciID"] != want.PciID || ours["mtu"] != float64(want.Mtu)):
			t.Errorf("printed 1.1.0 lost pciID/mtu: %v", ours)
		}
		for j, ip := range wire.IPs {
			if got, was := ip.Interface, res.IPs[j].Interface; (got == nil) != (was == nil) || got != nil && *got != *was {
				t.Errorf("printed %s: IP %d interface %v, want %v", v, j, deref(got), deref(was))
			}
		}
	}
}

func deref(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func TestOurInterface(t *testing.T) {
	iface := func(name, mac, sandbox, pci string) *current.Interface {
		return &current.Interface{Name: name, Mac: mac, Sandbox: sandbox, PciID: pci}
	}
	tests := []struct {
		name            string
		ifaces          []*current.Interface
		ifName, pci, mc string
		want            int
	}{
		{"none", nil, "net1", vfPCI, ipoibMAC, -1},
		{"by name", []*current.Interface{iface("eth0", "", podNetns, ""), iface("net1", "", podNetns, "")}, "net1", "", "", 1},
		{"by name without sandbox", []*current.Interface{iface("net1", "", "", "")}, "net1", "", "", 0},
		{"by MAC", []*current.Interface{iface("eth0", otherMAC, podNetns, ""), iface("x", ipoibMAC, podNetns, "")}, "net1", "", ipoibMAC, 1},
		{"by MAC, case-insensitive", []*current.Interface{iface("x", ipoibMACUp, podNetns, "")}, "net1", "", ipoibMAC, 0},
		{"by pciID", []*current.Interface{iface("x", "", podNetns, vfPCI)}, "net1", vfPCI, "", 0},
		{"pciID beats earlier name", []*current.Interface{iface("net1", "", podNetns, ""), iface("x", "", podNetns, vfPCI)}, "net1", vfPCI, "", 1},
		{"pciID beats earlier MAC", []*current.Interface{iface("y", ipoibMAC, podNetns, ""), iface("x", "", podNetns, vfPCI)}, "net1", vfPCI, ipoibMAC, 1},
		{"first of name and MAC matches wins", []*current.Interface{iface("y", ipoibMAC, podNetns, ""), iface("net1", "", podNetns, "")}, "net1", "", ipoibMAC, 0},
		{"other sandbox skipped", []*current.Interface{iface("net1", ipoibMAC, otherNetns, vfPCI)}, "net1", vfPCI, ipoibMAC, -1},
		{"other sandbox skipped, ours later", []*current.Interface{iface("net1", "", otherNetns, ""), iface("net1", "", podNetns, "")}, "net1", "", "", 1},
		{"empty pci matches no empty pciID", []*current.Interface{iface("x", "", podNetns, "")}, "net1", "", "", -1},
		{"empty MAC matches no empty mac", []*current.Interface{iface("x", "", podNetns, "")}, "net1", "", "", -1},
		{"different pciID is not ours", []*current.Interface{iface("x", otherMAC, podNetns, "0000:18:00.3")}, "net1", vfPCI, ipoibMAC, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := &current.Result{CNIVersion: "1.1.0", Interfaces: tc.ifaces}
			if got := ourInterface(res, podNetns, tc.ifName, tc.pci, tc.mc); got != tc.want {
				t.Errorf("ourInterface = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCorrectResultThroughParsePrevResult runs the path ADD takes: the
// prevResult embedded in the network configuration, read with
// version.ParsePrevResult, corrected and printed in the config's version.
func TestCorrectResultThroughParsePrevResult(t *testing.T) {
	for _, v := range cniVersions {
		t.Run(v, func(t *testing.T) {
			prev := prevResultJSON(t, v, []prevIface{{Name: "ibp24s0f0v0", Mac: ipoibMAC, Sandbox: podNetns}},
				[]prevIP{{idx(0), "10.56.0.5/16"}})
			conf := parseConf(t, fmt.Sprintf(`{"cniVersion": %q, "name": "ib-net", "type": "sriov-stable-cni",
				"deviceID": %q, "prevResult": %s}`, v, vfPCI, prev))
			got, err := parsePrevResult(conf)
			if err != nil {
				t.Fatalf("parsePrevResult: %v", err)
			}
			res := correctResult(got, current.Interface{Name: "net1", Mac: ipoibMAC, Mtu: 4092, Sandbox: podNetns, PciID: vfPCI})
			conv, err := res.GetAsVersion(conf.CNIVersion)
			if err != nil {
				t.Fatalf("GetAsVersion(%s): %v", conf.CNIVersion, err)
			}
			if conv.Version() != v {
				t.Errorf("printed version %s, want %s", conv.Version(), v)
			}
			back, err := current.NewResultFromResult(conv)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Interfaces) != 1 || back.Interfaces[0].Name != "net1" || len(back.IPs) != 1 ||
				!back.IPs[0].Address.IP.Equal(net.ParseIP("10.56.0.5")) {
				t.Errorf("round trip: %+v", back)
			}
		})
	}
}
