package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzSysfsValues feeds one arbitrary attribute value to every value
// parser. None may panic; what parses must survive a round trip through
// its own formatting (the GUID in all three forms).
func FuzzSysfsValues(f *testing.F) {
	for _, s := range []string{
		"b83f:d203:00aa:0100\n", "0000:0000:0000:0000", "ffff:ffff:ffff:ffff", "b8:3f:d2:03:00:aa:01:00", "b83fd20300aa0100",
		"4: ACTIVE\n", "1: DOWN", "5: ACTIVE_DEFER", "5: LinkUp", "7: Phy Test", "9", " 3 : ARMED ", ":", "-1: x", "99999999999999999999: big",
		"g83f:d203:00aa:0100", "b83f:d203:00aa:01", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if g, err := ParseGUID(s); err == nil {
			for _, form := range []string{g.String(), g.Colon(), fmt.Sprintf("%016x", uint64(g))} {
				if back, err := ParseGUID(form); err != nil || back != g {
					t.Fatalf("GUID %q: %s parses back as %v, %v", s, form, back, err)
				}
			}
			if g.Valid() == (g == GUIDZero || g == GUIDAllOnes) {
				t.Fatalf("GUID %s: Valid() = %v", g, g.Valid())
			}
		}
		if st, err := ParsePortState(s); err == nil {
			if st.Num < 0 {
				t.Fatalf("port state %q: negative number %d", s, st.Num)
			}
			if back, err := ParsePortState(st.String()); err != nil || back != st {
				t.Fatalf("port state %q: %q parses back as %+v, %v", s, st.String(), back, err)
			}
		}
		if st, err := ParsePhysState(s); err == nil {
			if st.Num < 0 {
				t.Fatalf("physical state %q: negative number %d", s, st.Num)
			}
			if back, err := ParsePhysState(st.String()); err != nil || back != st {
				t.Fatalf("physical state %q: %q parses back as %+v, %v", s, st.String(), back, err)
			}
		}
	})
}

// FuzzReadVF lays out an odd tree (arbitrary attribute contents, port and
// virtfn entry names, physfn target) and reads it. The reader may refuse,
// but must not panic, and what it returns must be consistent: a VF with a
// PF has an index and every port number is its directory's.
func FuzzReadVF(f *testing.F) {
	f.Add("b83f:d203:00aa:0100", "4: ACTIVE", "5: LinkUp", "InfiniBand", "1", "0", "../0000:18:00.0", "mlx5_0")
	f.Add("0000:0000:0000:0000", "1: DOWN", "3: Disabled", "Ethernet", "2", "7", "../0000:18:00.0", "mlx5_3")
	f.Add("zz", "x", "", "", "one", "x1", "../../nowhere", "")
	f.Add("ffff:ffff:ffff:ffff", "4", "5", "IB", "-1", "00", "physfn", "..")
	f.Add("b83f:d203:00aa:0100", "4: ACTIVE", "5: LinkUp", "InfiniBand", "1", "0", "/abs/0000:18:00.0", "mlx5_0")
	f.Fuzz(func(t *testing.T, guid, state, phys, layer, port, virtfn, physfn, rdma string) {
		const vf, pf = "0000:18:00.2", "0000:18:00.0"
		root := t.TempDir()
		devs := filepath.Join(root, "bus", "pci", "devices")
		mkdir := func(p string) {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		mkdir(filepath.Join(devs, vf))
		mkdir(filepath.Join(devs, pf))
		mkdir(filepath.Join(root, "class", "infiniband"))
		if physfn != "" && !strings.ContainsRune(physfn, 0) {
			_ = os.Symlink(physfn, filepath.Join(devs, vf, "physfn"))
		}
		if fuzzFileName(virtfn) {
			_ = os.Symlink("../"+vf, filepath.Join(devs, pf, "virtfn"+virtfn))
		}
		if fuzzFileName(rdma) {
			dev := filepath.Join(devs, vf, "infiniband", rdma)
			mkdir(dev)
			_ = os.WriteFile(filepath.Join(dev, "node_guid"), []byte(guid), 0o644)
			_ = os.Symlink(dev, filepath.Join(root, "class", "infiniband", rdma))
			_ = os.Symlink("../../../"+vf, filepath.Join(dev, "device"))
			if fuzzFileName(port) {
				p := filepath.Join(dev, "ports", port)
				mkdir(p)
				_ = os.WriteFile(filepath.Join(p, "state"), []byte(state), 0o644)
				_ = os.WriteFile(filepath.Join(p, "phys_state"), []byte(phys), 0o644)
				_ = os.WriteFile(filepath.Join(p, "link_layer"), []byte(layer), 0o644)
			}
		}
		r := Reader{Root: root}
		if got, err := r.ReadVF(vf); err == nil {
			if got.PCI != vf || (got.PF == "") != (got.Index == -1) || got.Index < -1 {
				t.Fatalf("inconsistent VF: %+v", got)
			}
			for _, d := range got.RDMA {
				for _, p := range d.Ports {
					// The tree has one port directory: every port is it.
					if n, err := strconv.Atoi(port); err != nil || n != p.Num {
						t.Fatalf("port %d read from directory %q", p.Num, port)
					}
				}
			}
		}
		_, _ = r.RDMADevices(vf)
		_, _ = r.NodeGUIDs()
		_, _ = r.VFs(pf)
		_ = r.Readable()
	})
}

// fuzzFileName reports whether s can name one directory entry.
func fuzzFileName(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) < 200 && !strings.ContainsAny(s, "/\x00")
}
