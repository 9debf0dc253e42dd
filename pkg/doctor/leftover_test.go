package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

const leftoverPF = "0000:18:00.0"

func leftoverVF(i int) string { return fmt.Sprintf("0000:18:00.%d", i+2) }

func stableAlt(t *testing.T, i int) string {
	t.Helper()
	alt, err := config.RenderAltName(config.DefaultAltName, leftoverVF(i), leftoverPF, i)
	if err != nil {
		t.Fatal(err)
	}
	return alt
}

// leftoverNode is a node whose host netns holds four VFs:
//   - VF 0 came back from a pod deleted without DEL: named net1, with its
//     stable altname and the pod's altname rail0; its record remains, its
//     netns is gone; a .link file names it ib0v0;
//   - VF 1 came back while its name was taken: dev7, no altname;
//   - VF 2 is named net2 but a record whose netns exists claims it;
//   - VF 3 is as the host names it.
type leftoverNode struct {
	sys      *sysfstest.Tree
	links    map[string][]string
	stateDir string
	linkDir  string
}

func newLeftoverNode(t *testing.T) *leftoverNode {
	n := &leftoverNode{sys: sysfstest.New(t), stateDir: t.TempDir(), linkDir: t.TempDir()}
	n.sys.AddPF(leftoverPF, 8, sysfstest.Device{NetDev: "ibp24s0f0"})
	names := []string{"net1", "dev7", "net2", "ibp24s0f0v3"}
	for i, name := range names {
		n.sys.AddVF(leftoverPF, i, leftoverVF(i), sysfstest.Device{NetDev: name})
	}
	n.links = map[string][]string{"net1": {stableAlt(t, 0), "rail0"}, "dev7": nil, "net2": nil, "ibp24s0f0v3": {stableAlt(t, 3)}}
	store := state.NewStore(n.stateDir)
	for _, r := range []*state.Record{
		{Network: "rail", ContainerID: "gone", IfName: "net1", Netns: filepath.Join(t.TempDir(), "gone"), PCI: leftoverVF(0), AltName: "rail0"},
		{Network: "rail", ContainerID: "live", IfName: "net1", Netns: "/proc/self/ns/net", PCI: leftoverVF(2), AltName: stableAlt(t, 2)},
	} {
		r.Created = time.Now()
		if err := store.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	link := fmt.Sprintf("[Match]\nPath=pci-%s\n\n[Link]\nName=ib0v0\nAlternativeName=%s\n", leftoverVF(0), stableAlt(t, 0))
	if err := os.WriteFile(filepath.Join(n.linkDir, "10-sriov-stable-vf-0000-18-00.2.link"), []byte(link), 0o644); err != nil {
		t.Fatal(err)
	}
	// A .link file matching by MAC is not a VF's own.
	other := "[Match]\nMACAddress=02:00:00:00:00:01\nPath=pci-" + leftoverVF(1) + "\n[Link]\nName=mac0\n"
	if err := os.WriteFile(filepath.Join(n.linkDir, "20-other.link"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// The doctor reports free VFs that carry names a pod or the kernel left
// (VFs 0 and 1), with the host name to give back and the altnames to
// remove, and leaves alone a VF a live record claims and a VF named well.
func TestLeftoverVFsReported(t *testing.T) {
	n := newLeftoverNode(t)
	rep, err := inHostNetns(t, n.links, func() (*Report, error) {
		return Run(Options{SysfsRoot: n.sys.Root, StateDir: n.stateDir, LinkDir: n.linkDir})
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []key
	var findings []Finding
	for _, f := range rep.Findings {
		if f.Check == finding.CheckVFLeftover {
			got = append(got, key{f.Severity, f.Check, f.Subject})
			findings = append(findings, f)
		}
	}
	want := []key{{SeverityWarning, finding.CheckVFLeftover, leftoverVF(0)}, {SeverityWarning, finding.CheckVFLeftover, leftoverVF(1)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("leftover findings (-want +got):\n%s\n%s", diff, text(t, rep))
	}
	for i, words := range [][]string{
		{"named net1, a pod interface name", "rail0", "ip link set dev net1 name ib0v0", "ip link property del dev ib0v0 altname rail0"},
		{"named dev7", "ip link set dev dev7 name " + vfnet.FallbackName(leftoverVF(1))},
	} {
		all := findings[i].Message + " " + findings[i].Remedy
		for _, w := range words {
			if !strings.Contains(all, w) {
				t.Errorf("finding about %s lacks %q:\n%s", findings[i].Subject, w, all)
			}
		}
		if strings.Contains(all, stableAlt(t, i)+",") || strings.Contains(all, "altname "+stableAlt(t, i)) {
			t.Errorf("finding about %s would remove the VF's stable altname:\n%s", findings[i].Subject, all)
		}
	}

	// Without a state dir the check does not run.
	rep, err = inHostNetns(t, n.links, func() (*Report, error) { return Run(Options{SysfsRoot: n.sys.Root}) })
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Check == finding.CheckVFLeftover {
			t.Errorf("leftover finding without a state dir: %+v", f)
		}
	}
}

// TestUnreadableRecordReported: a FIFO named like a record in the state
// dir is not waited on; the doctor says which record it could not read and
// judges the VFs of the others as before.
func TestUnreadableRecordReported(t *testing.T) {
	n := newLeftoverNode(t)
	fifo := filepath.Join(n.stateDir, "attachments", "rail_fifo_net1.json")
	safefiletest.FIFO(t, fifo)
	requireRoot(t)
	var rep *Report
	var runErr, err error
	safefiletest.Within(t, safefiletest.Prompt, "the doctor", func() {
		rep, runErr, err = withHostLinks(n.links, func() (*Report, error) {
			return Run(Options{SysfsRoot: n.sys.Root, StateDir: n.stateDir, LinkDir: n.linkDir})
		})
	})
	if err = errors.Join(err, runErr); err != nil {
		t.Fatal(err)
	}
	var got []key
	for _, f := range rep.Findings {
		if f.Check != finding.CheckVFLeftover {
			continue
		}
		got = append(got, key{f.Severity, f.Check, f.Subject})
		if f.Subject == "node" && !strings.Contains(f.Message, fifo+" is a FIFO, not a regular file") {
			t.Errorf("the finding about unreadable records does not name the FIFO: %s", f.Message)
		}
	}
	want := []key{{SeverityWarning, finding.CheckVFLeftover, leftoverVF(0)}, {SeverityWarning, finding.CheckVFLeftover, leftoverVF(1)},
		{SeverityWarning, finding.CheckVFLeftover, "node"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("leftover findings with a FIFO record (-want +got):\n%s\n%s", diff, text(t, rep))
	}
}
