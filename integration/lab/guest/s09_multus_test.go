//go:build labguest

package guest

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestLab09MultusThinPlugin: the same chain delegated by the Multus thin
// plugin (static delegates, no kubeconfig), as a cluster runs it: ADD gives
// the pod its VF with the right pciID and MAC, CHECK passes through Multus,
// DEL returns the VF and leaves no record.
func TestLab09MultusThinPlugin(t *testing.T) {
	e := newEnv(t)
	var as []*attachment
	for i, v := range theLab.PFs[1].VFs[:3] {
		list, err := confList(e.multusConf(v, i))
		if err != nil {
			t.Fatal(err)
		}
		a := &attachment{e: e, pod: newPod(t, fmt.Sprintf("multus%d", i)), vf: v, list: list}
		t.Cleanup(a.delIfStillInPod)
		as = append(as, a)
	}
	addCheckDel(t, e, as)
}

// multusConf is the thin plugin's configuration with the SR-IOV network
// list as its one static delegate.
func (e *env) multusConf(v vf, i int) map[string]any {
	return map[string]any{
		"cniVersion": cniVersion,
		"name":       "multus-cni-network",
		"plugins": []any{map[string]any{
			"type":        "multus",
			"binDir":      *binDir,
			"cniDir":      filepath.Join(e.dir, "multus"),
			"logFile":     filepath.Join(e.dir, fmt.Sprintf("multus%d.log", i)),
			"logLevel":    "verbose",
			"logToStderr": false,
			"delegates":   []any{e.netConf(v, opts{})},
		}},
	}
}
