package hostconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestComputeVFs(t *testing.T) {
	cases := []struct {
		pf             string
		offset, stride int
		count          int
		want           []string
		err            string
	}{
		// The QEMU lab's igb: offset 0x80, stride 2 (LAB.md).
		{"0000:01:00.0", 0x80, 2, 7, []string{"0000:01:10.0", "0000:01:10.2", "0000:01:10.4", "0000:01:10.6", "0000:01:11.0", "0000:01:11.2", "0000:01:11.4"}, ""},
		// Port 1 of a dual-port ConnectX-7 with NUM_OF_VFS=16.
		{"0000:18:00.1", 17, 1, 3, []string{"0000:18:02.2", "0000:18:02.3", "0000:18:02.4"}, ""},
		// VFs past the last function of a bus continue on the next bus.
		{"0002:3a:1f.6", 1, 1, 3, []string{"0002:3a:1f.7", "0002:3b:00.0", "0002:3b:00.1"}, ""},
		{"0000:ff:1f.6", 1, 1, 2, nil, "VF 1 at routing ID 0x10000 is past the last bus of domain 0000"},
		{"0000:18:00", 1, 1, 1, nil, `PCI address "0000:18:00" is not dddd:bb:dd.f`},
	}
	for _, tc := range cases {
		got, err := computeVFs(tc.pf, tc.offset, tc.stride, tc.count)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("computeVFs(%s): error %v, want %q", tc.pf, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("computeVFs(%s): %v", tc.pf, err)
		} else if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("computeVFs(%s) (-want +got):\n%s", tc.pf, diff)
		}
	}
}

func pfAddrs(p *Plan) []string {
	var out []string
	for _, pf := range p.PFs {
		out = append(out, pf.PCI)
	}
	return out
}

func TestResolveMatch(t *testing.T) {
	k := newDGXBoot(t)
	cx7 := []string{"0000:18:00.0", "0000:18:00.1", "0000:40:00.0", "0000:40:00.1", "0000:9a:00.0", "0000:9a:00.1", "0000:c0:00.0", "0000:c0:00.1"}

	p := mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root())
	if diff := cmp.Diff(cx7, pfAddrs(p)); diff != "" {
		t.Errorf("ConnectX-7 match (-want +got):\n%s", diff)
	}
	// Vendor only: every SR-IOV capable Mellanox PF, the BlueField-3 too,
	// never the GPUs; pfidx follows the PCI order.
	p = mustResolve(t, mustParse(t, "vfs: 8\npfs: [{match: {vendor: 0x15b3}}]\n"), k.root())
	if diff := cmp.Diff(append(append([]string{}, cx7[:6]...), "0000:ba:00.0", cx7[6], cx7[7]), pfAddrs(p)); diff != "" {
		t.Errorf("Mellanox match (-want +got):\n%s", diff)
	}
	if p.PFs[6].PCI != "0000:ba:00.0" || p.PFs[6].Index != 6 || p.PFs[7].VFs[0].Name != "pf7vf0" {
		t.Errorf("pfidx does not follow PCI order: %+v", p.PFs[6])
	}
	// The first entry that selects a PF decides its settings.
	p = mustResolve(t, mustParse(t, "linkType: infiniband\nvfs: 8\npfs:\n  - {pci: 0000:c0:00.1, vfs: 2}\n  - match: {vendor: 0x15b3, device: 0x1021}\n"), k.root())
	for _, pf := range p.PFs {
		want := 8
		if pf.PCI == "0000:c0:00.1" {
			want = 2
		}
		if pf.NumVFs != want || len(pf.VFs) != want {
			t.Errorf("PF %s: %d VFs planned, want %d", pf.PCI, len(pf.VFs), want)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	const ib = "linkType: infiniband\nvfs: 8\n"
	cases := []struct {
		name    string
		spec    string
		offline bool
		prepare func(t *testing.T, k *kernel)
		want    string
	}{
		{"match needs sysfs", ib + "pfs: [{match: {vendor: 0x15b3}}]\n", true, nil,
			"pfs[0]: match vendor 0x15b3 needs --sysfs-root to find the PFs; or list them by pci"},
		{"match finds nothing", ib + "pfs: [{match: {vendor: 0x15b3, device: 0x1023}}]\n", false, nil,
			"pfs[0]: match vendor 0x15b3 device 0x1023 found no SR-IOV capable PF under"},
		{"offline without offsets", ib + "pfs: [{pci: 0000:18:00.0}]\n", true, nil,
			"cannot resolve PF 0000:18:00.0 (pfs[0]): VF addresses unknown: run with --sysfs-root /sys on the node, or set vfOffset and vfStride (lspci -vvv -s 0000:18:00.0"},
		{"PF absent", ib + "pfs: [{pci: 0000:5e:00.0}]\n", false, nil,
			"cannot resolve PF 0000:5e:00.0 (pfs[0]): no such PCI device under"},
		{"not SR-IOV capable", ib + "pfs: [{pci: 0000:1b:00.0}]\n", false, nil,
			"cannot resolve PF 0000:1b:00.0 (pfs[0]): not SR-IOV capable"},
		{"firmware allows fewer", ib + "pfs: [{pci: 0000:18:00.0, vfs: 20}]\n", false, nil,
			"supports 16 VFs (sriov_totalvfs), the spec wants 20: raise it in the firmware (ConnectX: mlxconfig -d 0000:18:00.0 set NUM_OF_VFS=20, then reboot) or lower vfs"},
		{"spec offset contradicts sysfs", ib + "pfs: [{pci: 0000:18:00.1, vfOffset: 9, vfStride: 1}]\n", false, nil,
			"pfs[0] says vfOffset 9, vfStride 1 but sysfs says sriov_offset 17, sriov_stride 1"},
		{"virtfn contradicts offset", ib + "pfs: [{pci: 0000:18:00.0}]\n", false, func(t *testing.T, k *kernel) {
			bringUp(t, k, mustResolve(t, mustParse(t, ib+"pfs: [{pci: 0000:18:00.0}]\n"), k.root()))
			k.tree.WriteFile(filepath.Join(k.tree.DevicePath("0000:18:00.0"), "sriov_offset"), "3")
		}, "virtfn0 is 0000:18:00.2 but offset 3 and stride 1 give 0000:18:00.3"},
		{"old kernel, VFs missing", ib + "pfs: [{pci: 0000:18:00.0}]\n", false, func(t *testing.T, k *kernel) {
			for _, f := range []string{"sriov_offset", "sriov_stride"} {
				if err := os.Remove(filepath.Join(k.tree.DevicePath("0000:18:00.0"), f)); err != nil {
					t.Fatal(err)
				}
			}
		}, "VF 0 does not exist yet and sysfs has no sriov_offset/sriov_stride to compute its address: create the VFs first"},
		{"name too long for a large VF index", "vfs: 11\nvfName: abcdefghijkl{pfidx}v{vf}\npfs: [{pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}]\n", true, nil,
			`VF 10 of PF 0000:18:00.0: vfName: pattern "abcdefghijkl{pfidx}v{vf}" gives "abcdefghijkl0v10", longer than 15 bytes`},
		{"vfName without {vf}", "vfs: 2\nvfName: ib{pfidx}v\npfs: [{pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}]\n", true, nil,
			`VF 0 of PF 0000:18:00.0 and VF 1 of PF 0000:18:00.0 would both be named "ib0v"`},
		{"altName without {pci}", "vfs: 2\naltName: vf-{vf}\npfs:\n  - {pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}\n  - {pci: 0000:40:00.0, vfOffset: 2, vfStride: 1}\n", true, nil,
			`VF 0 of PF 0000:18:00.0 (altname) and VF 0 of PF 0000:40:00.0 (altname) would both be named "vf-0"`},
		{"PF name clashes with a VF name", "vfs: 2\npfName: ib{pfidx}v0\nvfName: ib{pfidx}v{vf}\npfs: [{pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}]\n", true, nil,
			`PF 0000:18:00.0 and VF 0 of PF 0000:18:00.0 would both be named "ib0v0"`},
		{"VF on top of a PF", "vfs: 2\npfs:\n  - {pci: 0000:18:00.0, vfOffset: 1, vfStride: 1}\n  - {pci: 0000:18:00.1, vfOffset: 17, vfStride: 1}\n", true, nil,
			"PF 0000:18:00.1 and VF 0 of PF 0000:18:00.0 both resolve to PCI address 0000:18:00.1: check vfOffset and vfStride"},
		{"overlapping VFs", "vfs: 8\npfs:\n  - {pci: 0000:18:00.0, vfOffset: 2, vfStride: 1}\n  - {pci: 0000:18:00.1, vfOffset: 5, vfStride: 1}\n", true, nil,
			"VF 4 of PF 0000:18:00.0 and VF 0 of PF 0000:18:00.1 both resolve to PCI address 0000:18:00.6"},
	}
	shared := newDGXBoot(t) // for the cases that change nothing
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := ""
			switch {
			case tc.prepare != nil:
				k := newDGXBoot(t)
				tc.prepare(t, k)
				root = k.root()
			case !tc.offline:
				root = shared.root()
			}
			_, err := Resolve(mustParse(t, tc.spec), root)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Resolve error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
		})
	}
	// Per-PF hardware problems wrap ErrPFUnresolved; the caller can tell them
	// from spec errors.
	_, err := Resolve(mustParse(t, ib+"pfs: [{pci: 0000:5e:00.0}]\n"), shared.root())
	if !errors.Is(err, ErrPFUnresolved) {
		t.Errorf("absent PF: %v does not wrap ErrPFUnresolved", err)
	}
}

// TestResolveUsesExistingVFs: on a kernel without sriov_offset the VFs
// already created are found through their virtfnN links.
func TestResolveUsesExistingVFs(t *testing.T) {
	k := newDGXBoot(t)
	spec := mustParse(t, "linkType: infiniband\nvfs: 8\npfs: [{pci: 0000:18:00.1}]\n")
	want := mustResolve(t, spec, k.root())
	bringUp(t, k, want)
	for _, f := range []string{"sriov_offset", "sriov_stride"} {
		if err := os.Remove(filepath.Join(k.tree.DevicePath("0000:18:00.1"), f)); err != nil {
			t.Fatal(err)
		}
	}
	got := mustResolve(t, spec, k.root())
	if diff := cmp.Diff(want.PFs, got.PFs); diff != "" {
		t.Errorf("plan from virtfn links differs (-offsets +links):\n%s", diff)
	}
}
