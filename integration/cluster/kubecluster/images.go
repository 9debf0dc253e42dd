package kubecluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PauseImage is the sandbox image and the test pods' image: the static
// cmd/pause binary as /pause in one layer, written without a container
// engine (as tools/mkimage writes the project's image) and imported into
// containerd, so nothing is ever pulled.
const PauseImage = "localhost/sriov-stable-e2e/pause:1"

// writePauseImage writes the pause image, from the pause binary of binDir,
// as a docker-archive tarball.
func writePauseImage(binDir, out string) error {
	bin, err := os.ReadFile(filepath.Join(binDir, "pause"))
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/pause"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	ref, err := name.NewTag(PauseImage)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

// importImages loads the pause image and the run's images into
// containerd's k8s.io namespace, where the CRI looks for images.
func (c *Cluster) importImages() error {
	pause := filepath.Join(runDir, "pause-image.tar")
	if err := writePauseImage(c.cfg.BinDir, pause); err != nil {
		return fmt.Errorf("write the pause image: %w", err)
	}
	for _, archive := range append([]string{pause}, c.cfg.Images...) {
		if _, err := c.Ctr("images", "import", archive); err != nil {
			return err
		}
	}
	return nil
}
