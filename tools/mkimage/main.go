// Command mkimage builds the sriov-stable-cni container image without a
// container engine: per platform, an empty (scratch) base plus one layer
// holding the static binaries under /usr/bin, written as an OCI image layout
// tar archive that skopeo, podman, crane or `ctr import` can push or load. It
// is a build tool; its go-containerregistry dependency never reaches the CNI
// binary.
//
// One platform gives the image itself (index.json points at its manifest):
//
//	mkimage -binary bin/sriov-stable-cni -agent bin/sriov-stable-agent -arch amd64 \
//	        -ref ghcr.io/sriov-stable-cni/sriov-stable-cni:v0.1.0 -out bin/sriov-stable-cni-image.tar
//
// Several, each -platform OS/ARCH=CNI,AGENT, give an image index of one image
// per platform (index.json points at the index), as `make image` builds it:
//
//	mkimage -platform linux/amd64=bin/linux-amd64/sriov-stable-cni,bin/linux-amd64/sriov-stable-agent \
//	        -platform linux/arm64=bin/linux-arm64/sriov-stable-cni,bin/linux-arm64/sriov-stable-agent \
//	        -ref ghcr.io/sriov-stable-cni/sriov-stable-cni:v0.1.0 -out bin/sriov-stable-cni-image.tar
//
// The output is reproducible: file times come from SOURCE_DATE_EPOCH (0 when
// unset), so the same binaries give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image and the default command: the DaemonSet's containers
// set their own command, this default is what `docker run IMAGE` would do.
const (
	cniPath   = "/usr/bin/sriov-stable-cni"
	agentPath = "/usr/bin/sriov-stable-agent"
)

var (
	entrypoint = []string{cniPath, "install"}
	defaultCmd = []string{"--cni-bin-dir", "/host/opt/cni/bin", "--wait"}
)

// Annotation keys in index.json: the OCI tag name (what skopeo's
// oci-archive:FILE:TAG selects) and containerd's full image name.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// platformBinaries is one platform's image content.
type platformBinaries struct {
	Arch   string // GOARCH of the binaries; the OS is always linux
	Binary string // the CNI binary, installed as /usr/bin/sriov-stable-cni
	Agent  string // agent binary, /usr/bin/sriov-stable-agent (the monitor DaemonSet runs it)
}

// options is one archive build: one platform gives an image, several an
// image index.
type options struct {
	Platforms []platformBinaries
	Ref       string    // full image reference with a tag
	Out       string    // the OCI layout tar archive to write
	Version   string    // org.opencontainers.image.version label
	Created   time.Time // file and config times
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(2)
	}
	digest, err := build(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: %s@%s\n", o.Out, o.Ref, digest)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var o options
	var single platformBinaries
	fl.StringVar(&single.Binary, "binary", "", "static sriov-stable-cni binary (one platform; or use -platform)")
	fl.StringVar(&single.Agent, "agent", "", "static sriov-stable-agent binary (one platform: the monitor DaemonSet runs it from the image)")
	fl.StringVar(&single.Arch, "arch", runtime.GOARCH, "architecture -binary and -agent were built for")
	fl.Func("platform", "`linux/ARCH=CNI,AGENT`: one platform's binaries; repeat for an image index (not with -binary, -agent, -arch)",
		func(v string) error {
			p, err := parsePlatform(v)
			if err == nil {
				o.Platforms = append(o.Platforms, p)
			}
			return err
		})
	fl.StringVar(&o.Ref, "ref", "ghcr.io/sriov-stable-cni/sriov-stable-cni:dev", "image reference recorded in the archive")
	fl.StringVar(&o.Out, "out", "", "OCI layout tar archive to write (required)")
	fl.StringVar(&o.Version, "version", "dev", "version label")
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	var singleSet bool
	fl.Visit(func(f *flag.Flag) {
		singleSet = singleSet || f.Name == "binary" || f.Name == "agent" || f.Name == "arch"
	})
	switch {
	case len(o.Platforms) > 0 && singleSet:
		return o, errors.New("-platform cannot be combined with -binary, -agent or -arch")
	case len(o.Platforms) == 0:
		if single.Binary == "" || single.Agent == "" {
			return o, errors.New("-binary and -agent (or -platform) are required")
		}
		o.Platforms = []platformBinaries{single}
	}
	if o.Out == "" {
		return o, errors.New("-out is required")
	}
	created, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return o, err
	}
	o.Created = created
	return o, nil
}

// parsePlatform reads one -platform value, linux/ARCH=CNI,AGENT.
func parsePlatform(v string) (platformBinaries, error) {
	plat, bins, ok := strings.Cut(v, "=")
	osName, arch, okPlat := strings.Cut(plat, "/")
	cni, agent, okBins := strings.Cut(bins, ",")
	if !ok || !okPlat || !okBins || arch == "" || cni == "" || agent == "" {
		return platformBinaries{}, fmt.Errorf("-platform %q: want linux/ARCH=CNI,AGENT", v)
	}
	if osName != "linux" {
		return platformBinaries{}, fmt.Errorf("-platform %q: the plugin runs on linux only, not %q", v, osName)
	}
	return platformBinaries{Arch: arch, Binary: cni, Agent: agent}, nil
}

// sourceDateEpoch reads the reproducible-builds timestamp; unset means 0.
func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a non-negative integer", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// build writes the archive and returns the digest index.json points at: the
// image manifest's for one platform, the image index's for several.
func build(o options) (v1.Hash, error) {
	ref, err := name.NewTag(o.Ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: %w", o.Ref, err)
	}
	if len(o.Platforms) == 0 {
		return v1.Hash{}, errors.New("no platform given")
	}
	seen := map[string]bool{}
	var images []platformImage
	for _, p := range o.Platforms {
		if seen[p.Arch] {
			return v1.Hash{}, fmt.Errorf("platform linux/%s given twice", p.Arch)
		}
		seen[p.Arch] = true
		img, err := platformImageOf(p, o)
		if err != nil {
			return v1.Hash{}, err
		}
		images = append(images, img)
	}
	var top layoutEntry
	if len(images) == 1 {
		top = images[0]
	} else {
		top = makeIndex(images)
	}
	digest, err := top.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest: %w", err)
	}
	if err := writeArchive(top, ref, o); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// platformImage is one platform's image and the platform it runs on.
type platformImage struct {
	v1.Image
	platform v1.Platform
}

// layoutEntry is what index.json points at: a platformImage or an image index.
type layoutEntry interface {
	Digest() (v1.Hash, error)
}

// platformImageOf builds the image of one platform's binaries.
func platformImageOf(p platformBinaries, o options) (platformImage, error) {
	if p.Agent == "" {
		return platformImage{}, errors.New("no sriov-stable-agent binary given: the monitor DaemonSet runs it from this image")
	}
	if p.Arch == "" {
		return platformImage{}, fmt.Errorf("no architecture given for %s", p.Binary)
	}
	files := []layerFile{{path: cniPath, src: p.Binary}, {path: agentPath, src: p.Agent}}
	layerTar, err := makeLayerTar(files, o.Created)
	if err != nil {
		return platformImage{}, err
	}
	img, err := makeImage(layerTar, p.Arch, o)
	if err != nil {
		return platformImage{}, fmt.Errorf("linux/%s: %w", p.Arch, err)
	}
	return platformImage{Image: img, platform: v1.Platform{OS: "linux", Architecture: p.Arch}}, nil
}

// makeIndex is the OCI image index of images, each descriptor carrying its
// platform, so a runtime pulls or unpacks only its own.
func makeIndex(images []platformImage) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img.Image,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &img.platform},
		})
	}
	return idx
}

type layerFile struct{ path, src string }

// makeLayerTar returns the uncompressed layer: parent directories, then each
// file as root-owned 0755, all with the same timestamp.
func makeLayerTar(files []layerFile, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		content, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("read %s for %s: %w", f.src, f.path, err)
		}
		if len(content) == 0 {
			return nil, fmt.Errorf("%s for %s is empty", f.src, f.path)
		}
		rel := f.path[1:]
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if _, seen := dirs[d]; !seen {
				dirs[d] = true
			}
		}
		if err := writeDirs(tw, dirs, mtime); err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: int64(len(content)),
			ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer header %s: %w", rel, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("layer content %s: %w", rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

// writeDirs emits the directory entries still pending (true), parents first,
// and marks them written (false).
func writeDirs(tw *tar.Writer, dirs map[string]bool, mtime time.Time) error {
	var pending []string
	for d, todo := range dirs {
		if todo {
			pending = append(pending, d)
		}
	}
	slices.Sort(pending)
	for _, d := range pending {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("layer header %s: %w", d, err)
		}
		dirs[d] = false
	}
	return nil
}

// makeImage puts the layer on an empty base with OCI media types and sets
// the entrypoint, platform and labels.
func makeImage(layerTar []byte, arch string, o options) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("base config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = arch
	cfg.Created = v1.Time{Time: o.Created}
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Cmd = defaultCmd
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "sriov-stable-cni",
		"org.opencontainers.image.source":  "https://github.com/sriov-stable-cni/sriov-stable-cni",
		"org.opencontainers.image.version": o.Version,
	}
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "mkimage: " + cniPath + " " + agentPath},
	})
	if err != nil {
		return nil, fmt.Errorf("add layer: %w", err)
	}
	return img, nil
}

// writeArchive writes top (an image or an index) as an OCI image layout into a
// scratch directory, then tars that directory into o.Out through a temporary
// file and a rename, so a failed build never leaves a truncated archive under
// the final name.
func writeArchive(top layoutEntry, ref name.Tag, o options) (err error) {
	scratch, err := os.MkdirTemp("", "mkimage-layout-")
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(scratch)
	p, err := layout.Write(scratch, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	annotations := layout.WithAnnotations(map[string]string{
		annotationRefName:        ref.TagStr(),
		annotationContainerdName: ref.Name(),
	})
	switch top := top.(type) {
	case platformImage:
		err = p.AppendImage(top.Image, annotations, layout.WithPlatform(top.platform))
	case v1.ImageIndex:
		err = p.AppendIndex(top, annotations)
	default:
		err = fmt.Errorf("unexpected %T", top)
	}
	if err != nil {
		return fmt.Errorf("write image into OCI layout: %w", err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(o.Out), "."+filepath.Base(o.Out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create archive: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tarDir(tmp, scratch, o.Created); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod archive: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	if err = os.Rename(tmp.Name(), o.Out); err != nil {
		return fmt.Errorf("rename archive into place: %w", err)
	}
	return nil
}

// tarDir writes the tree under root to w in lexical order with fixed owners
// and times, so the archive bytes depend only on the content.
func tarDir(w io.Writer, root string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX})
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(b)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive OCI layout: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive OCI layout: %w", err)
	}
	return nil
}
