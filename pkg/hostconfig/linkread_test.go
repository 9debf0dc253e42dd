package hostconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

// TestLinkFilesAreUntrusted: among the .link files, a FIFO and a file over
// the cap are reported and skipped without blocking, a link to /dev/null
// (a masked file) is skipped in silence, and the regular file beside them
// is still read.
func TestLinkFilesAreUntrusted(t *testing.T) {
	dir := t.TempDir()
	good := "[Match]\nPath=pci-0000:18:00.2\n[Link]\nName=ibs1f0v0\nAlternativeName=vf-0000:18:00.2\n"
	if err := os.WriteFile(filepath.Join(dir, "10-good.link"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	safefiletest.FIFO(t, filepath.Join(dir, "20-fifo.link"))
	if err := os.Symlink(os.DevNull, filepath.Join(dir, "30-masked.link")); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("# padding\n", maxLinkFileSize/10+1)
	if err := os.WriteFile(filepath.Join(dir, "40-huge.link"), []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	var names map[string]LinkNames
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "reading the .link files", func() { names, err = ReadLinkNames(dir) })
	if got := names["0000:18:00.2"]; got.Name != "ibs1f0v0" || got.AltName != "vf-0000:18:00.2" || got.File != "10-good.link" || len(names) != 1 {
		t.Errorf("names %+v, want the good file's alone", names)
	}
	if !errors.Is(err, safefile.ErrNotRegular) || !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("error %v, want the FIFO and the oversized file named", err)
	}
	if err != nil && strings.Contains(err.Error(), "30-masked.link") {
		t.Errorf("the masked file is reported: %v", err)
	}
}

// The reader reads what the writer writes: every .link file Render makes
// for the DGX spec, installed, reads back as the plan's names and
// altnames, PF and VF alike.
func TestReadLinkNamesReadsRender(t *testing.T) {
	p := mustResolve(t, readSpec(t, "dgx-h200-pci.yaml"), "")
	dir := t.TempDir()
	if err := WriteFiles(dir, render(t, p)); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLinkNames(filepath.Join(dir, "etc/systemd/network"))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, pf := range p.PFs {
		if pf.Name != "" {
			want++
			if n := got[pf.PCI]; n.Name != pf.Name || n.AltName != pf.AltName {
				t.Errorf("PF %s reads back as %+v, want %q, %q", pf.PCI, n, pf.Name, pf.AltName)
			}
		}
		for _, vf := range pf.VFs {
			want++
			if n := got[vf.PCI]; n.Name != vf.Name || n.AltName != vf.AltName {
				t.Errorf("VF %s reads back as %+v, want %q, %q", vf.PCI, n, vf.Name, vf.AltName)
			}
		}
	}
	if want < 64 || len(got) != want {
		t.Errorf("%d functions named by the .link files, want %d (at least the DGX's 64 VFs)", len(got), want)
	}
}
