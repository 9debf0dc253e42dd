//go:build clustere2e

package cluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pauseImage is the sandbox image and the test pods' image: the static
// cmd/pause binary as /pause in one layer, written without a container
// engine (as tools/mkimage writes the project's image) and imported into
// containerd, so nothing is ever pulled.
const pauseImage = "localhost/sriov-stable-e2e/pause:1"

// writePauseImage writes the pause image as a docker-archive tarball.
func writePauseImage(out string) error {
	bin, err := os.ReadFile(filepath.Join(*binDir, "pause"))
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
	ref, err := name.NewTag(pauseImage)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

// importImage loads an image archive into containerd's k8s.io namespace,
// where the CRI looks for images.
func (c *cluster) importImage(archive string) error {
	cmd := exec.Command(filepath.Join(*binDir, "ctr"), "--address", containerdSocket, "--namespace", "k8s.io",
		"images", "import", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}

// imageArchive is the project image of make image in images/<which>
// (a, the version first deployed, or b, the upgrade).
func imageArchive(which string) string {
	return filepath.Join(*imageDir, which, "sriov-stable-cni-image.tar")
}

// imageRef is the project image of a version, as make image tags it.
func imageRef(version string) string { return *imageName + ":" + version }
