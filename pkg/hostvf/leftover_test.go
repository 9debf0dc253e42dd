package hostvf

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// With Strict (the monitor's host repairs), only a name or altname that an
// attachment of the VF itself carried is a leftover, or dev<N> on a VF that
// was attached, or another VF's stable altname; names that only look like
// a pod's, or equal another pod's ifname, are left for a person (the
// doctor, without Strict, reports them).
func TestFindLeftoversStrict(t *testing.T) {
	const leftoverPF = "0000:18:00.0"
	leftoverVF := func(i int) string { return fmt.Sprintf("0000:18:00.%d", i+2) }
	// An unrenderable name would show in the comparisons below.
	stableAlt := func(i int) string {
		alt, _ := config.RenderAltName(config.DefaultAltName, leftoverVF(i), leftoverPF, i)
		return alt
	}
	sys := sysfstest.New(t)
	sys.AddPF(leftoverPF, 8, sysfstest.Device{})
	type vf struct{ name, alts string }
	vfs := []vf{
		{"rail7", ""},                            // 0: never attached; a live pod's ifname
		{"net3", "net4 eth5"},                    // 1: never attached; shaped like pod and kernel names
		{"rail5", ""},                            // 2: History: an attachment of it was named rail5
		{"dev9", ""},                             // 3: History: it was attached; dev9 is the kernel's name for it on the way home
		{"dev8", ""},                             // 4: never attached
		{"net1", "rail0 " + stableAlt(0) + " x"}, // 5: its record's netns is gone (ifname net1, altname rail0); carries VF 0's stable altname
		{"ens2", ""},                             // 6: live record claims it
	}
	var links []netlink.Link
	for i, v := range vfs {
		sys.AddVF(leftoverPF, i, leftoverVF(i), sysfstest.Device{NetDev: v.name})
		links = append(links, &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: v.name, Index: 10 + i, AltNames: strings.Fields(v.alts)}})
	}
	gone := filepath.Join(t.TempDir(), "gone")
	in := Input{
		SysfsRoot: sys.Root, Links: links,
		Records: []*state.Record{
			{Network: "rail", ContainerID: "live", IfName: "rail7", Netns: "/proc/self/ns/net", PCI: leftoverVF(6)},
			{Network: "rail", ContainerID: "gone", IfName: "net1", Netns: gone, PCI: leftoverVF(5), AltName: "rail0"},
		},
		History: map[string][]string{leftoverVF(2): {"rail5"}, leftoverVF(3): {"net1", stableAlt(3)}},
	}
	judged := func(strict bool) map[string]string {
		in.Strict = strict
		found, _, err := FindLeftovers(in)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, lo := range found {
			out[lo.Name] = lo.Rename + " -" + strings.Join(lo.StaleAltNames, " -")
		}
		return out
	}
	fallback := func(i int) string { return vfnet.FallbackName(leftoverVF(i)) }
	wantStrict := map[string]string{
		"rail5": fallback(2) + " -",
		"dev9":  fallback(3) + " -",
		"net1":  fallback(5) + " -rail0 -" + stableAlt(0),
	}
	if diff := cmp.Diff(wantStrict, judged(true)); diff != "" {
		t.Errorf("strict (-want +got):\n%s", diff)
	}
	wantLax := map[string]string{
		"rail7": fallback(0) + " -",
		"net3":  fallback(1) + " -net4 -eth5",
		"rail5": fallback(2) + " -",
		"dev9":  fallback(3) + " -",
		"dev8":  fallback(4) + " -",
		"net1":  fallback(5) + " -rail0 -" + stableAlt(0),
	}
	if diff := cmp.Diff(wantLax, judged(false)); diff != "" {
		t.Errorf("without Strict (-want +got):\n%s", diff)
	}
}
