package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const pf = "0000:18:00.0"

var standInSeq atomic.Int32

// guid is a distinct, valid node GUID for VF i.
func guid(i int) string { return fmt.Sprintf("b83f:d203:00aa:%04x", 0x100+i) }

// env is one test's node: fixture sysfs, state dir, binaries, stand-ins.
type env struct {
	t        *testing.T
	bins     string
	sys      *sysfstest.Tree
	stateDir string
	cacheDir string
	vfs      []*testutil.StandIn
}

type vfOpts struct {
	rdma     bool // give VFs an IB RDMA device
	noAlt    bool // stand-ins without the host altname
	mutate   func(i int, r *sysfstest.RDMA)
	numVFs   int
	hostBase string
}

func newEnv(t *testing.T, o vfOpts) *env {
	t.Helper()
	if o.numVFs == 0 {
		o.numVFs = 2
	}
	e := &env{t: t, bins: harness.Bins(t), sys: sysfstest.New(t), stateDir: filepath.Join(t.TempDir(), "state"), cacheDir: t.TempDir()}
	e.sys.AddPF(pf, 64, sysfstest.Device{})
	for i := range o.numVFs {
		d := sysfstest.Device{}
		if o.rdma {
			r := &sysfstest.RDMA{Name: fmt.Sprintf("mlx5_%d", 10+i), NodeGUID: guid(i), FWVer: "28.43.1014"}
			if o.mutate != nil {
				o.mutate(i, r)
			}
			d.RDMA = r
		}
		e.sys.AddVF(pf, i, testutil.VFAddr(i), d)
		host := fmt.Sprintf("sv%d", standInSeq.Add(1))
		e.vfs = append(e.vfs, testutil.NewStandIn(t, host, testutil.VFAddr(i), !o.noAlt))
	}
	return e
}

// ours is our plugin's entry, with deviceID and pciBusID as Multus writes
// them, and extra fields merged in.
func (e *env) ours(vf int, extra map[string]any) map[string]any {
	m := map[string]any{
		"type": "sriov-stable-cni", "sysfsRoot": e.sys.Root, "stateDir": e.stateDir,
		"portWaitMs": 300, "logLevel": "debug", "logFile": filepath.Join(e.stateDir, "..", "plugin.log"),
	}
	if vf >= 0 {
		m["deviceID"], m["pciBusID"] = testutil.VFAddr(vf), testutil.VFAddr(vf)
	}
	return testutil.Merge(m, extra)
}

func (e *env) hostDevice(vf int) map[string]any {
	return map[string]any{"type": "host-device", "device": e.vfs[vf].Host}
}

func udev(newName string) map[string]any {
	return map[string]any{"type": "rename-as-udev", "newName": newName}
}

// chain builds [host-device, (middle…), sriov-stable-cni] for one VF.
func (e *env) chain(version string, vf int, extra map[string]any, middle ...map[string]any) *harness.Chain {
	plugins := append([]map[string]any{e.hostDevice(vf)}, middle...)
	plugins = append(plugins, e.ours(vf, extra))
	return harness.NewChainWithCache(e.t, e.bins, e.cacheDir, harness.ConfList(version, "vfnet", plugins...))
}

func rt(id string, pod ns.NetNS) *libcni.RuntimeConf { return harness.Runtime(id, pod, "net1", nil) }

// records lists the attachment record files left in the state dir.
func (e *env) records() []string {
	m, _ := filepath.Glob(filepath.Join(e.stateDir, "attachments", "*.json"))
	return m
}

func (e *env) wantRecords(n int) {
	e.t.Helper()
	if got := e.records(); len(got) != n {
		e.t.Fatalf("state dir holds %d records, want %d: %v", len(got), n, got)
	}
}

// wantHome asserts the stand-in is back in the host netns under its own name.
func (e *env) wantHome(vf int) {
	e.t.Helper()
	if l := testutil.HostLink(e.vfs[vf].Host); l == nil {
		e.t.Fatalf("stand-in %s is not back in the host netns", e.vfs[vf].Host)
	}
}

func (e *env) logTail() string {
	b, _ := os.ReadFile(filepath.Join(e.stateDir, "..", "plugin.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func asCurrent(t *testing.T, r types.Result) *current.Result {
	t.Helper()
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("convert result: %v", err)
	}
	return res
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
