package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResourceFlags(t *testing.T) {
	r := resourceFlags{}
	if err := r.Set("example.com/vf=0000:18:00.2,0000:18:00.3"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(resourceFlags{"example.com/vf": {"0000:18:00.2", "0000:18:00.3"}}, r); diff != "" {
		t.Errorf("parsed (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"example.com/vf=0000:40:00.2", "novf=0000:18:00.2", "example.com/other", "=0000:18:00.2", "example.com/x="} {
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

func TestEnvName(t *testing.T) {
	p := &plugin{name: "sriov-stable-cni.io/ibvf-zero-guid"}
	if got, want := p.envName(), "PCIDEVICE_SRIOV_STABLE_CNI_IO_IBVF_ZERO_GUID"; got != want {
		t.Errorf("envName() = %q, want %q", got, want)
	}
}

// TestDeviceInfoHasAddressOnly: the file leaves rdma-device and
// pf-pci-address to the CNI plugin's completion.
func TestDeviceInfoHasAddressOnly(t *testing.T) {
	got, err := json.Marshal(deviceInfo("0000:18:00.2"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:00.2"}}`
	if string(got) != want {
		t.Errorf("device info %s, want %s", got, want)
	}
}
