package main

import (
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
