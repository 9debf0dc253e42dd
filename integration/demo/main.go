// Command demo shows the plugin's main job end to end, the way a runtime
// drives it: libcni runs [host-device, rename-as-udev, sriov-stable-cni]
// in private namespaces with a veth standing in for an InfiniBand VF and a
// fixture sysfs tree for the HCA. It shows a udev rename repaired, drift
// caught by CHECK, a clean DEL, and a zero GUID refused.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const (
	pfAddr = "0000:18:00.0"
	vfAddr = "0000:18:00.2"
	vf2    = "0000:18:00.3"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory with sriov-stable-cni, host-device and rename-as-udev")
	flag.Parse()
	code, parent, err := harness.Reexec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
	if parent {
		os.Exit(code)
	}
	abs, _ := filepath.Abs(*binDir)
	tb := harness.NewProgramTB() // Fatalf cleans up and exits 1
	demo(tb, abs)
	tb.Close()
	fmt.Println("\ndemo passed: rename repaired, drift caught, clean DEL, zero GUID refused.")
}

func step(n int, format string, a ...any) { fmt.Printf("\n[%d] %s\n", n, fmt.Sprintf(format, a...)) }
func say(format string, a ...any)         { fmt.Printf("    %s\n", fmt.Sprintf(format, a...)) }

func demo(tb *harness.ProgramTB, bins string) {
	sys := sysfstest.New(tb)
	sys.AddPF(pfAddr, 8, sysfstest.Device{})
	sys.AddVF(pfAddr, 0, vfAddr, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_10", NodeGUID: "b83f:d203:00aa:0100", FWVer: "28.43.1014"}})
	sys.AddVF(pfAddr, 1, vf2, sysfstest.Device{RDMA: &sysfstest.RDMA{Name: "mlx5_11", NodeGUID: "0000:0000:0000:0000"}})
	stateDir := filepath.Join(tb.TempDir(), "state")
	logFile := filepath.Join(tb.TempDir(), "plugin.log")
	sv := testutil.NewStandIn(tb, "ibs9f0v0", vfAddr, true)

	step(1, "A node, in private namespaces: ConnectX-7 PF %s, VF %s (mlx5_10, node GUID b83f:d203:00aa:0100,", pfAddr, vfAddr)
	say("port 4: ACTIVE / 5: LinkUp, InfiniBand) in a fixture sysfs at %s;", sys.Root)
	say("its netdev is the veth %q with the stable altname %s (as the host's .link file gives it).", sv.Host, sv.AltName)

	ours := map[string]any{
		"type": "sriov-stable-cni", "deviceID": vfAddr, "pciBusID": vfAddr, "linkLayer": "infiniband",
		"sysfsRoot": sys.Root, "stateDir": stateDir, "logFile": logFile, "portWaitMs": 500,
	}
	conf := harness.ConfList("1.1.0", "ib-vfs",
		map[string]any{"type": "host-device", "device": sv.Host},
		map[string]any{"type": "rename-as-udev", "newName": "eth7"},
		ours)
	chain := harness.NewChain(tb, bins, conf)
	pod := testutil.NewNetns(tb)
	rt := harness.Runtime("pod-a", pod, "net1", nil)

	step(2, "ADD through libcni: host-device moves the VF into the pod as net1, then a udev-like rename")
	say("makes it eth7 (the field failure), then sriov-stable-cni runs:")
	res, err := chain.Add(rt)
	if err != nil {
		tb.Fatalf("ADD: %v", err)
	}
	cur, _ := current.NewResultFromResult(res)
	b, _ := json.Marshal(cur.Interfaces)
	say("result interfaces: %s", b)
	say("pod netns holds: %s", linkSummary(tb, pod))
	say("plugin log: %s", grepLog(logFile, "repaired VF name"))
	if testutil.LinkIn(tb, pod, "net1") == nil {
		tb.Fatalf("net1 not repaired")
	}

	step(3, "CHECK through libcni: the attachment is as recorded")
	if err := chain.Check(rt); err != nil {
		tb.Fatalf("CHECK: %v", err)
	}
	say("CHECK passed")

	step(4, "Drift: inside the pod net1 is renamed to eth9, and the HCA port drops to 1: DOWN")
	testutil.RenameIn(tb, pod, "net1", "eth9")
	sys.SetPort(vfAddr, "mlx5_10", 1, sysfstest.Port{State: "1: DOWN", PhysState: "3: Disabled"})
	err = chain.Only("sriov-stable-cni").Check(rt)
	if harness.ErrCode(err) != 105 {
		tb.Fatalf("CHECK after drift: got %v, want error 105", err)
	}
	for i, line := range strings.Split(cniMsg(err), "\n") {
		if i == 0 {
			say("CHECK -> %s", line)
			continue
		}
		say("  %s", line)
	}

	step(5, "DEL through libcni: sriov-stable-cni renames eth9 back to net1, host-device returns the VF")
	if err := chain.Del(rt); err != nil {
		tb.Fatalf("DEL: %v", err)
	}
	if testutil.HostLink(sv.Host) == nil {
		tb.Fatalf("VF not back on the host")
	}
	recs, _ := filepath.Glob(filepath.Join(stateDir, "attachments", "*.json"))
	say("host has %s again; pod holds: %s; records left: %d", sv.Host, linkSummary(tb, pod), len(recs))

	zeroGUID(tb, bins, ours)
}

// zeroGUID is the demo's last step: the same chain on a VF whose GUID is
// all zeros, refused at ADD and given back at DEL.
func zeroGUID(tb *harness.ProgramTB, bins string, ours map[string]any) {
	step(6, "A VF whose GUID came up all zeros (%s, mlx5_11) is refused at ADD", vf2)
	sv2 := testutil.NewStandIn(tb, "ibs9f0v1", vf2, true)
	ours2 := maps.Clone(ours)
	ours2["deviceID"], ours2["pciBusID"] = vf2, vf2
	chain2 := harness.NewChain(tb, bins, harness.ConfList("1.1.0", "ib-vfs", map[string]any{"type": "host-device", "device": sv2.Host}, ours2))
	pod2 := testutil.NewNetns(tb)
	rt2 := harness.Runtime("pod-b", pod2, "net1", nil)
	_, err := chain2.Add(rt2)
	if harness.ErrCode(err) != 102 {
		tb.Fatalf("ADD with zero GUID: got %v, want error 102", err)
	}
	say("ADD -> %s", cniMsg(err))
	if err := chain2.Del(rt2); err != nil {
		tb.Fatalf("DEL after refused ADD: %v", err)
	}
	say("DEL after the refused ADD returned %s to the host: %v", sv2.Host, testutil.HostLink(sv2.Host) != nil)
}

func linkSummary(tb harness.TB, n ns.NetNS) string {
	var out []string
	for _, name := range testutil.LinksIn(tb, n) {
		l := testutil.LinkIn(tb, n, name)
		if l != nil && len(l.Attrs().AltNames) > 0 {
			name += " (altname " + strings.Join(l.Attrs().AltNames, ", ") + ")"
		}
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

func grepLog(path, substr string) string {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, substr) {
			if i := strings.Index(line, "msg="); i >= 0 {
				return line[i:]
			}
			return line
		}
	}
	return "(no line with " + substr + ")"
}

func cniMsg(err error) string {
	s := err.Error()
	if i := strings.Index(s, "): "); i >= 0 {
		return s[i+3:]
	}
	return s
}
