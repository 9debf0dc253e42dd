package hostconfig

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestGoldenDGXH200 generates the seed's layout (4 dual-port ConnectX-7 =
// 8 PFs, 8 VFs each, InfiniBand) from a fixture node's sysfs and compares
// every file with testdata/golden/dgx-h200. Run with -update to rewrite.
func TestGoldenDGXH200(t *testing.T) {
	k := newDGXBoot(t)
	files := render(t, mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root()))
	if len(files) != 8+64+2 {
		t.Fatalf("got %d files, want 8 PF and 64 VF .link files, the unit and its spec", len(files))
	}
	compareGolden(t, filepath.Join("testdata", "golden", "dgx-h200"), files)
}

// TestGoldenIGBLab pins what the QEMU lab installs in its guest.
func TestGoldenIGBLab(t *testing.T) {
	k := newIGBBoot(t)
	files := render(t, mustResolve(t, readSpec(t, "igb-lab.yaml"), k.root()))
	compareGolden(t, filepath.Join("testdata", "golden", "igb-lab"), files)
}

// TestOfflineEqualsDiscovered: listing the PFs by address with their VF
// offset and stride, without sysfs, gives byte for byte the same files as
// matching them on the node.
func TestOfflineEqualsDiscovered(t *testing.T) {
	k := newDGXBoot(t)
	discovered := render(t, mustResolve(t, readSpec(t, "dgx-h200.yaml"), k.root()))
	offline := render(t, mustResolve(t, readSpec(t, "dgx-h200-pci.yaml"), ""))
	if diff := cmp.Diff(fileMap(discovered), fileMap(offline)); diff != "" {
		t.Errorf("offline generation differs from discovery (-discovered +offline):\n%s", diff)
	}
}

func render(t testing.TB, p *Plan) []File {
	t.Helper()
	files, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return files
}

func fileMap(files []File) map[string]string {
	m := map[string]string{}
	for _, f := range files {
		m[f.Path+" "+f.Mode.String()] = string(f.Data)
	}
	return m
}

func compareGolden(t *testing.T, dir string, files []File) {
	t.Helper()
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := WriteFiles(dir, files); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		want[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatalf("read golden files (run with -update to create them): %v", err)
	}
	var extra []string
	for _, f := range files {
		w, ok := want[f.Path]
		if !ok {
			extra = append(extra, f.Path)
			continue
		}
		delete(want, f.Path)
		if !bytes.Equal(w, f.Data) {
			t.Errorf("%s differs from the golden file (-golden +generated):\n%s", f.Path, cmp.Diff(string(w), string(f.Data)))
		}
	}
	var missing []string
	for p := range want {
		missing = append(missing, p)
	}
	sort.Strings(missing)
	if len(extra) > 0 || len(missing) > 0 {
		t.Errorf("generated but not golden: %s\ngolden but not generated: %s\n(run go test -update to accept)",
			strings.Join(extra, " "), strings.Join(missing, " "))
	}
}

// TestWriteFilesPrunesEarlierLinks: regenerating into the same directory
// with fewer VFs removes the .link files of the VFs that are gone, and
// leaves files that are not ours.
func TestWriteFilesPrunesEarlierLinks(t *testing.T) {
	dir := t.TempDir()
	eight := render(t, mustResolve(t, readSpec(t, "dgx-h200-pci.yaml"), ""))
	if err := WriteFiles(dir, eight); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, LinkDir, "50-other.link")
	if err := os.WriteFile(foreign, []byte("[Match]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := readSpec(t, "dgx-h200-pci.yaml")
	spec.VFs = 2
	two := render(t, mustResolve(t, spec, ""))
	if err := WriteFiles(dir, two); err != nil {
		t.Fatal(err)
	}
	links, _ := filepath.Glob(filepath.Join(dir, LinkDir, "*.link"))
	if len(links) != 8+16+1 {
		t.Errorf("%d .link files after regenerating with 2 VFs per PF, want 8 PF + 16 VF + 1 foreign: %v", len(links), links)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a file that is not ours was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, LinkDir, "10-sriov-stable-vf-0000-18-00.4.link")); err == nil {
		t.Error("the .link file of VF 2 of PF 0000:18:00.0 survived")
	}
}
