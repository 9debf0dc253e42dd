package plugin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
)

// TestPCIFromRuntimeConfig: the address reaches the plugin only through
// the capabilities Multus and runtimes fill (deviceID, CNIDeviceInfoFile).
func TestPCIFromRuntimeConfig(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 2})
	caps := map[string]any{"capabilities": map[string]bool{"deviceID": true, "CNIDeviceInfoFile": true},
		"deviceID": nil, "pciBusID": nil}

	t.Run("deviceID capability", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		c := e.chain("1.1.0", 0, caps)
		r := harness.Runtime("c-cap", pod, "net1", map[string]any{"deviceID": strings.ToUpper(testutil.VFAddr(0))})
		res, err := c.Add(r)
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if got := asCurrent(t, res).Interfaces[0].PciID; got != testutil.VFAddr(0) {
			t.Errorf("pciID %q, want %s (normalized)", got, testutil.VFAddr(0))
		}
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		e.wantHome(0)
	})

	t.Run("device info file", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		info := filepath.Join(t.TempDir(), "devinfo.json")
		b, _ := json.Marshal(map[string]any{"type": "pci", "version": "1.1.0",
			"pci": map[string]string{"pci-address": testutil.VFAddr(1), "pf-pci-address": pf}})
		if err := os.WriteFile(info, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c := e.chain("1.1.0", 1, caps)
		r := harness.Runtime("c-devinfo", pod, "net1", map[string]any{"CNIDeviceInfoFile": info})
		res, err := c.Add(r)
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if got := asCurrent(t, res).Interfaces[0].PciID; got != testutil.VFAddr(1) {
			t.Errorf("pciID %q, want %s", got, testutil.VFAddr(1))
		}
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		e.wantHome(1)
	})

	t.Run("garbage device info file", func(t *testing.T) {
		pod := testutil.NewNetns(t)
		info := filepath.Join(t.TempDir(), "devinfo.json")
		if err := os.WriteFile(info, []byte(`{"type":"pci","pci":{"pci-address":"../../etc"}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		c := e.chain("1.1.0", 0, caps)
		r := harness.Runtime("c-badinfo", pod, "net1", map[string]any{"CNIDeviceInfoFile": info})
		_, err := c.Add(r)
		if harness.ErrCode(err) != 7 || !strings.Contains(err.Error(), "CNIDeviceInfoFile") {
			t.Fatalf("ADD: got %v, want code 7 naming CNIDeviceInfoFile", err)
		}
		if err := c.Del(r); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		e.wantHome(0)
	})
}

// TestVFWithoutIdentityIsNotGuessed: a stand-in with no PCI parent and no
// altname cannot be identified; the plugin must not pick it by ifname.
func TestVFWithoutIdentityIsNotGuessed(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1, noAlt: true})
	pod := testutil.NewNetns(t)
	c := e.chain("1.1.0", 0, nil)
	r := rt("c-noid", pod)
	_, err := c.Add(r)
	if harness.ErrCode(err) != 100 || !strings.Contains(err.Error(), "it holds: ") || !strings.Contains(err.Error(), "net1") {
		t.Fatalf("ADD: got %v, want code 100 listing the netns's links", err)
	}
	e.wantRecords(0)
	if err := c.Del(r); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.wantHome(0)
}

func TestBadRuntimeArgs(t *testing.T) {
	e := newEnv(t, vfOpts{numVFs: 1})
	pod := testutil.NewNetns(t)
	// Our plugin alone with a hand-made prevResult: host-device would reject
	// these names before us.
	prev := map[string]any{"cniVersion": "1.1.0", "interfaces": []map[string]any{{"name": "net1", "sandbox": pod.Path()}}}
	conf := e.ours(0, map[string]any{"cniVersion": "1.1.0", "name": "vfnet", "prevResult": prev})
	stdin, _ := json.Marshal(conf)
	for _, tc := range []struct{ ifname, cid, substr string }{
		// skel rejects these before our code runs; the binary must still
		// answer with code 4 and a message naming what is wrong.
		{"averyveryverylongname", "c1", "interface name is too long"},
		{"net/1", "c1", "interface name contains /"},
		{"net1", "../c1", "invalid characters in containerID"},
	} {
		out, code := harness.Exec(t, filepath.Join(e.bins, "sriov-stable-cni"), "ADD", tc.cid, pod.Path(), tc.ifname, stdin)
		if code != 4 || !strings.Contains(out, tc.substr) {
			t.Errorf("ifname %q cid %q: got code %d %s, want 4 naming %s", tc.ifname, tc.cid, code, out, tc.substr)
		}
	}
	e.wantRecords(0)
}
