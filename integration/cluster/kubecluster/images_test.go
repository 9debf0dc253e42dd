package kubecluster

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestPauseImage: the archive containerd imports is tagged PauseImage and
// holds one layer with the binary as /pause (executable), its entrypoint,
// for this machine's architecture.
func TestPauseImage(t *testing.T) {
	dir := t.TempDir()
	bin := []byte("\x7fELF a static pause")
	if err := os.WriteFile(filepath.Join(dir, "pause"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pause.tar")
	if err := writePauseImage(dir, out); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(PauseImage)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("the archive has no image %s: %v", PauseImage, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || !slices.Equal(cfg.Config.Entrypoint, []string{"/pause"}) {
		t.Errorf("image config: os %q arch %q entrypoint %q, want linux %s [/pause]", cfg.OS, cfg.Architecture, runtime.GOARCH, cfg.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "pause" || h.Mode != 0o755 || string(got) != string(bin) {
		t.Errorf("the layer holds %s mode %o (%d bytes), want pause mode 755 with the binary", h.Name, h.Mode, len(got))
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("the layer holds more than /pause: %v", err)
	}
}
