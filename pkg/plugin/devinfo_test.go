package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

func TestFillDeviceInfo(t *testing.T) {
	a := &attachment{pci: "0000:18:00.2", vf: &sysfs.VF{PF: "0000:18:00.0"},
		rdma: &rdma.Lookup{Devices: []rdma.Device{{RDMADevice: sysfs.RDMADevice{Name: "mlx5_9"}}}}}
	for _, tc := range []struct {
		name    string
		in      string // "" = no file
		want    string // "" = the file as it was
		changed bool
	}{
		{name: "1.1.0 without RDMA device or PF: both filled, the rest kept",
			in:      `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:00.2","vhost-net":""},"extra":{"x":1}}`,
			want:    `{"extra":{"x":1},"pci":{"pci-address":"0000:18:00.2","pf-pci-address":"0000:18:00.0","rdma-device":"mlx5_9","vhost-net":""},"type":"pci","version":"1.1.0"}`,
			changed: true},
		{name: "1.0.0 has no pf-pci-address: only the RDMA device",
			in:      `{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:18:00.2"}}`,
			want:    `{"pci":{"pci-address":"0000:18:00.2","rdma-device":"mlx5_9"},"type":"pci","version":"1.0.0"}`,
			changed: true},
		{name: "values already there are the writer's",
			in: `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:00.2","rdma-device":"mlx5_1","pf-pci-address":"0000:aa:00.0"}}`},
		{name: "another device's file",
			in: `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:00.3"}}`},
		{name: "not a pci file",
			in: `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa0"}}`},
		{name: "not JSON", in: `{"type":"pci",`},
		{name: "no file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "net1-devinfo.json")
			if tc.in != "" {
				if err := os.WriteFile(path, []byte(tc.in), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			changed, _ := fillDeviceInfo(path, a)
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			got, err := os.ReadFile(path)
			if tc.in == "" {
				if err == nil {
					t.Errorf("a file was created: %s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
			if tc.changed {
				var v any
				if err := json.Unmarshal(got, &v); err != nil {
					t.Errorf("rewritten file is not JSON: %v", err)
				}
				if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o640 {
					t.Errorf("mode after the rewrite: %v %v, want 0640", info.Mode(), err)
				}
				if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) > 0 {
					t.Errorf("temp files left: %v", left)
				}
			}
		})
	}
}
