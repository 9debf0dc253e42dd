//go:build labguest

package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

const (
	ifName      = "net1"
	networkName = "sriov-lab"
	cniVersion  = "1.1.0"
	// cniTimeout bounds one runtime call (a whole chain) under TCG.
	cniTimeout = 2 * time.Minute
	// labPortWaitMs doubles the plugin's 5 s default: under TCG on a busy
	// CI machine a warmed-up igbvf VF reports carrier 0.1–0.5 s after link
	// up, but that can stretch (TestLab00Infrastructure logs it).
	labPortWaitMs = 10000
)

// env is one scenario's runtime: a libcni handle with its own result cache,
// a state directory for sriov-stable-cni and a log file, all under
// -lab.work/<test name> so they are kept as artifacts.
type env struct {
	t        *testing.T
	dir      string
	stateDir string
	cni      *libcni.CNIConfig
	exec     *hookExec
}

// newEnv prepares a scenario and registers the lab's hygiene check, which
// runs after every other cleanup of the test (pods, attachments).
func newEnv(t *testing.T) *env {
	t.Helper()
	dir := filepath.Join(*workDir, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, stateDir: filepath.Join(dir, "state"), exec: newHookExec()}
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{*binDir}, filepath.Join(dir, "cache"), e.exec)
	t.Cleanup(func() { restoreLab(t) })
	return e
}

// opts varies one attachment's network configuration.
type opts struct {
	cniVersion string         // default cniVersion
	plugin     map[string]any // extra keys for the sriov-stable-cni entry
	// isolate chains rdma-isolate after host-device: the VF's RDMA device
	// moves into the pod netns, as rdma-cni (or ib-sriov-cni's
	// rdmaIsolation) moves it in RDMA netns exclusive mode.
	isolate bool
}

// netConf is the conflist a NetworkAttachmentDefinition would hold for an
// SR-IOV VF, with deviceID and pciBusID written into every plugin of the
// list as Multus writes them for the allocated VF.
func (e *env) netConf(v vf, o opts) map[string]any {
	ver := o.cniVersion
	if ver == "" {
		ver = cniVersion
	}
	ours := map[string]any{
		"type":         "sriov-stable-cni",
		"deviceID":     v.PCI,
		"pciBusID":     v.PCI,
		"capabilities": map[string]any{"deviceID": true},
		"stateDir":     e.stateDir,
		"logFile":      filepath.Join(e.dir, "sriov-stable-cni.log"),
		"logLevel":     "debug",
		"portWaitMs":   labPortWaitMs,
	}
	maps.Copy(ours, o.plugin)
	plugins := []any{map[string]any{"type": "host-device", "deviceID": v.PCI, "pciBusID": v.PCI}}
	if o.isolate {
		plugins = append(plugins, map[string]any{"type": "rdma-isolate", "deviceID": v.PCI, "pciBusID": v.PCI})
	}
	return map[string]any{
		"cniVersion": ver,
		"name":       networkName,
		"plugins":    append(plugins, ours),
	}
}

// attachment is one VF attached to one pod through one network list.
type attachment struct {
	e    *env
	pod  *pod
	vf   vf
	list *libcni.NetworkConfigList
}

// attach prepares (but does not ADD) the chain for a VF in a pod. The
// test's cleanup DELs it if the VF is still in the pod by then, so a
// failing scenario does not strand VFs.
func (e *env) attach(p *pod, v vf, o opts) *attachment {
	e.t.Helper()
	a, err := e.newAttachment(p, v, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(a.delIfStillInPod)
	return a
}

// newAttachment prepares the chain for a VF in a pod and leaves cleaning up
// to the caller; for goroutines, where a test may not stop.
func (e *env) newAttachment(p *pod, v vf, o opts) (*attachment, error) {
	list, err := confList(e.netConf(v, o))
	if err != nil {
		return nil, fmt.Errorf("network list for %s: %w", v, err)
	}
	return &attachment{e: e, pod: p, vf: v, list: list}, nil
}

func confList(conf map[string]any) (*libcni.NetworkConfigList, error) {
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(b)
}

// runtimeConf is what kubelet's runtime passes: container ID, netns,
// ifname, the K8S_POD_* args and the deviceID capability.
func (a *attachment) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: a.pod.ID,
		NetNS:       a.pod.Path(),
		IfName:      ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "lab"},
			{"K8S_POD_NAME", a.pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", a.pod.ID},
			{"K8S_POD_UID", a.pod.ID},
		},
		CapabilityArgs: map[string]any{"deviceID": a.vf.PCI},
	}
}

func (a *attachment) add() (types.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return a.e.cni.AddNetworkList(ctx, a.list, a.runtimeConf())
}

func (a *attachment) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return a.e.cni.CheckNetworkList(ctx, a.list, a.runtimeConf())
}

func (a *attachment) del() error {
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return a.e.cni.DelNetworkList(ctx, a.list, a.runtimeConf())
}

// ours returns the sriov-stable-cni entry of the list alone, named and
// versioned like the list, for calling that plugin on its own through libcni.
func (a *attachment) ours() (*libcni.PluginConfig, error) {
	last := a.list.Plugins[len(a.list.Plugins)-1]
	var conf map[string]any
	if err := json.Unmarshal(last.Bytes, &conf); err != nil {
		return nil, err
	}
	conf["name"], conf["cniVersion"] = a.list.Name, a.list.CNIVersion
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkPluginConfFromBytes(b)
}

// checkOurs runs CHECK of sriov-stable-cni alone, with the chain's cached
// final result as prevResult, as libcni gives it to the last plugin.
func (a *attachment) checkOurs() error {
	conf, err := a.ours()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return a.e.cni.CheckNetwork(ctx, conf, a.runtimeConf())
}

// delOurs runs DEL of sriov-stable-cni alone with the given netns path.
func (a *attachment) delOurs(netnsPath string) error {
	conf, err := a.ours()
	if err != nil {
		return err
	}
	rt := a.runtimeConf()
	rt.NetNS = netnsPath
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return a.e.cni.DelNetwork(ctx, conf, rt)
}

func (a *attachment) delIfStillInPod() {
	if a.pod.Path() == "" {
		return
	}
	if _, err := linkByParent(a.pod.Path(), a.vf.PCI); err != nil {
		return
	}
	if err := a.del(); err != nil {
		a.e.t.Errorf("cleanup DEL of %s in %s: %v", a.vf, a.pod, err)
	}
}

func (a *attachment) String() string { return fmt.Sprintf("%s in %s", a.vf, a.pod) }

// cniCode returns the CNI error code carried by err, or 0.
func cniCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// hookExec runs plugins as libcni does, calling a scenario's hook first.
// The hook stands for what races a chain on a real node (udev renaming the
// VF between the plugin before us and us).
type hookExec struct {
	invoke.Exec
	mu     sync.Mutex
	before func(plugin string, env map[string]string) error
}

func newHookExec() *hookExec {
	return &hookExec{Exec: &invoke.DefaultExec{
		RawExec:       &invoke.RawExec{Stderr: os.Stderr},
		PluginDecoder: version.PluginDecoder{},
	}}
}

func (h *hookExec) setBefore(f func(plugin string, env map[string]string) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.before = f
}

func (h *hookExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	h.mu.Lock()
	before := h.before
	h.mu.Unlock()
	if before != nil {
		if err := before(filepath.Base(path), envMap(environ)); err != nil {
			return nil, fmt.Errorf("lab hook before %s: %w", filepath.Base(path), err)
		}
	}
	return h.Exec.ExecPlugin(ctx, path, stdin, environ)
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "CNI_") {
			m[k] = v
		}
	}
	return m
}

// resultInterface converts a result to the current version and returns its
// entry for ifname in the pod's sandbox.
func resultInterface(r types.Result, sandbox string) (*current.Interface, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("convert result: %w", err)
	}
	for _, i := range res.Interfaces {
		if i.Name == ifName && i.Sandbox == sandbox {
			return i, nil
		}
	}
	b, _ := json.Marshal(res)
	return nil, fmt.Errorf("result has no interface %s in %s: %s", ifName, sandbox, b)
}
