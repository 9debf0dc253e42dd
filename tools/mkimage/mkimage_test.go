package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

// The archive is read back here by hand (archive/tar, encoding/json,
// sha256) rather than with go-containerregistry, so the test checks the OCI
// layout itself, not the library's view of it.

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type ociIndex struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type ociManifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// layerEntry is one file or directory found in the image layer.
type layerEntry struct {
	typ     byte
	mode    int64
	uid     int
	gid     int
	content []byte
}

// image is one platform's image found in the archive.
type image struct {
	desc     descriptor // its descriptor: in index.json, or in the image index
	manifest ociManifest
	config   ociConfig
	files    map[string]layerEntry // layer path (no leading slash) → entry
}

// archive is what inspectArchive found: index.json's single entry and
// either that image (one platform) or the image index it points at and its
// images, in index order.
type archive struct {
	top    descriptor // index.json's entry
	index  *ociIndex  // the image index top points at; nil for one platform
	images []image
}

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
)

// inspectArchive opens an OCI layout tar archive, checks every blob against
// its digest and size and the media types, and returns what it holds.
func inspectArchive(t testing.TB, path string) archive {
	t.Helper()
	entries := readTar(t, path)
	var ociLayout struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	unmarshal(t, entries["oci-layout"], &ociLayout)
	if ociLayout.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("oci-layout version %q, want 1.0.0", ociLayout.ImageLayoutVersion)
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
		if !ok {
			t.Fatalf("digest %q is not sha256", d.Digest)
		}
		b, ok := entries["blobs/sha256/"+hexSum]
		if !ok {
			t.Fatalf("blob %s missing from the archive", d.Digest)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexSum {
			t.Fatalf("blob %s content does not match its digest", d.Digest)
		}
		if int64(len(b)) != d.Size {
			t.Fatalf("blob %s is %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
		}
		return b
	}
	var layoutIndex ociIndex
	unmarshal(t, entries["index.json"], &layoutIndex)
	if len(layoutIndex.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want 1", len(layoutIndex.Manifests))
	}
	a := archive{top: layoutIndex.Manifests[0]}
	switch a.top.MediaType {
	case mediaTypeManifest:
		a.images = []image{inspectImage(t, a.top, blob)}
	case mediaTypeIndex:
		a.index = new(ociIndex)
		unmarshal(t, blob(a.top), a.index)
		if a.index.SchemaVersion != 2 || a.index.MediaType != mediaTypeIndex {
			t.Fatalf("image index %+v is not an OCI image index", a.index)
		}
		for _, d := range a.index.Manifests {
			if d.MediaType != mediaTypeManifest {
				t.Fatalf("image index entry %s has media type %q, want an image manifest", d.Digest, d.MediaType)
			}
			a.images = append(a.images, inspectImage(t, d, blob))
		}
	default:
		t.Fatalf("index.json entry media type %q", a.top.MediaType)
	}
	return a
}

// readTar returns the regular files of a tar archive by name.
func readTar(t testing.TB, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatalf("read archive %s: %v", path, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = b
	}
}

// inspectImage reads the image manifest md points at, its config and its
// single layer.
func inspectImage(t testing.TB, md descriptor, blob func(descriptor) []byte) image {
	t.Helper()
	img := image{desc: md}
	unmarshal(t, blob(md), &img.manifest)
	if img.manifest.SchemaVersion != 2 || img.manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Fatalf("manifest %+v is not an OCI image manifest", img.manifest)
	}
	unmarshal(t, blob(img.manifest.Config), &img.config)
	if len(img.manifest.Layers) != 1 || len(img.config.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers, %d diff_ids; want one layer on an empty base", len(img.manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	ld := img.manifest.Layers[0]
	if ld.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("layer media type %q", ld.MediaType)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(ld)))
	if err != nil {
		t.Fatalf("layer is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != img.config.RootFS.DiffIDs[0] {
		t.Fatal("config diff_id does not match the uncompressed layer")
	}
	img.files = map[string]layerEntry{}
	lr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read layer: %v", err)
		}
		b, err := io.ReadAll(lr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := img.files[hdr.Name]; dup {
			t.Fatalf("layer holds %s twice", hdr.Name)
		}
		img.files[hdr.Name] = layerEntry{typ: hdr.Typeflag, mode: hdr.Mode, uid: hdr.Uid, gid: hdr.Gid, content: b}
	}
	return img
}

// platforms lists the archive's images as OS/ARCH from their descriptors.
func (a archive) platforms() []string {
	var p []string
	for _, img := range a.images {
		if img.desc.Platform == nil {
			p = append(p, "(none)")
			continue
		}
		p = append(p, img.desc.Platform.OS+"/"+img.desc.Platform.Architecture)
	}
	return p
}

// image returns the image for linux/arch, failing the test when there is none.
func (a archive) image(t testing.TB, arch string) image {
	t.Helper()
	i := slices.Index(a.platforms(), "linux/"+arch)
	if i < 0 {
		t.Fatalf("no linux/%s image in the archive (have %v)", arch, a.platforms())
	}
	return a.images[i]
}

// file returns the content of path in the image's layer.
func (img image) file(t testing.TB, path string) []byte {
	t.Helper()
	e, ok := img.files[strings.TrimPrefix(path, "/")]
	if !ok {
		t.Fatalf("%s missing from the layer (have %v)", path, keys(img.files))
	}
	return e.content
}

func unmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
}

func writeFixture(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkBinary asserts the layer holds path as a root-owned 0755 file with
// exactly want's content.
func checkBinary(t *testing.T, img image, path string, want []byte) {
	t.Helper()
	e, ok := img.files[strings.TrimPrefix(path, "/")]
	if !ok {
		t.Fatalf("%s missing from the layer (have %v)", path, keys(img.files))
	}
	if e.typ != tar.TypeReg || e.mode != 0o755 || e.uid != 0 || e.gid != 0 {
		t.Errorf("%s: type %c mode %o owner %d:%d; want a regular file 0755 root:root", path, e.typ, e.mode, e.uid, e.gid)
	}
	if sum(e.content) != sum(want) {
		t.Errorf("%s content sha256 %s, want %s", path, sum(e.content), sum(want))
	}
}

func keys(m map[string]layerEntry) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

func TestArchiveLayout(t *testing.T) {
	cni := writeFixture(t, "cni binary bytes \x00\x01")
	agent := writeFixture(t, "agent binary bytes")
	out := filepath.Join(t.TempDir(), "image.tar")
	o := options{Platforms: []platformBinaries{{Arch: "arm64", Binary: cni, Agent: agent}},
		Ref: "registry.example/team/sriov-stable-cni:v1.2.3", Out: out, Version: "v1.2.3", Created: time.Unix(1700000000, 0).UTC()}
	digest, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	a := inspectArchive(t, out)
	if a.index != nil {
		t.Fatalf("one platform gave an image index %+v, want index.json to point at the image", a.index)
	}
	checkTop(t, a, digest.String(), "v1.2.3", "registry.example/team/sriov-stable-cni:v1.2.3")
	img := a.image(t, "arm64")
	checkConfig(t, img, "arm64", "v1.2.3")
	checkBinary(t, img, cniPath, []byte("cni binary bytes \x00\x01"))
	checkBinary(t, img, agentPath, []byte("agent binary bytes"))
	want := []string{"usr/", "usr/bin/", "usr/bin/sriov-stable-agent", "usr/bin/sriov-stable-cni"}
	if got := keys(img.files); !slices.Equal(got, want) {
		t.Errorf("layer holds %v, want %v", got, want)
	}
	for _, d := range []string{"usr/", "usr/bin/"} {
		if e := img.files[d]; e.typ != tar.TypeDir || e.mode != 0o755 {
			t.Errorf("%s: type %c mode %o, want a 0755 directory", d, e.typ, e.mode)
		}
	}
}

// TestIndexLayout builds two platforms: index.json points at an image index,
// annotated as a single image is, whose entries carry their platform and
// lead to images holding that platform's binaries.
func TestIndexLayout(t *testing.T) {
	o := options{Platforms: []platformBinaries{
		{Arch: "amd64", Binary: writeFixture(t, "amd64 cni"), Agent: writeFixture(t, "amd64 agent")},
		{Arch: "arm64", Binary: writeFixture(t, "arm64 cni"), Agent: writeFixture(t, "arm64 agent")},
	}, Ref: "registry.example/team/sriov-stable-cni:v1.2.3", Out: filepath.Join(t.TempDir(), "image.tar"),
		Version: "v1.2.3", Created: time.Unix(1700000000, 0).UTC()}
	digest, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	a := inspectArchive(t, o.Out)
	if a.index == nil {
		t.Fatalf("index.json points at a %s, want an image index", a.top.MediaType)
	}
	checkTop(t, a, digest.String(), "v1.2.3", "registry.example/team/sriov-stable-cni:v1.2.3")
	if got, want := a.platforms(), []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Fatalf("image index platforms %v, want %v", got, want)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		img := a.image(t, arch)
		checkConfig(t, img, arch, "v1.2.3")
		checkBinary(t, img, cniPath, []byte(arch+" cni"))
		checkBinary(t, img, agentPath, []byte(arch+" agent"))
	}
}

// checkTop asserts index.json's entry: the digest build returned and the
// tag annotations skopeo (oci-archive:FILE:TAG) and containerd read.
func checkTop(t *testing.T, a archive, digest, tag, name string) {
	t.Helper()
	if a.top.Digest != digest {
		t.Errorf("index.json points at %s, build returned %s", a.top.Digest, digest)
	}
	if ann := a.top.Annotations; ann[annotationRefName] != tag || ann[annotationContainerdName] != name {
		t.Errorf("index.json annotations %v, want %s=%s and %s=%s", ann, annotationRefName, tag, annotationContainerdName, name)
	}
}

// checkConfig asserts the image's descriptor and config say linux/arch and
// the config holds the entrypoint, default command and version label.
func checkConfig(t *testing.T, img image, arch, version string) {
	t.Helper()
	if p := img.desc.Platform; p == nil || p.OS != "linux" || p.Architecture != arch {
		t.Errorf("descriptor platform %+v, want linux/%s", p, arch)
	}
	c := img.config
	if c.OS != "linux" || c.Architecture != arch {
		t.Errorf("config platform %s/%s, want linux/%s", c.OS, c.Architecture, arch)
	}
	if want := []string{"/usr/bin/sriov-stable-cni", "install"}; !slices.Equal(c.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", c.Config.Entrypoint, want)
	}
	if want := []string{"--cni-bin-dir", "/host/opt/cni/bin", "--wait"}; !slices.Equal(c.Config.Cmd, want) {
		t.Errorf("cmd %q, want %q", c.Config.Cmd, want)
	}
	if c.Config.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("labels %v, want version %s", c.Config.Labels, version)
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	bin, agent := writeFixture(t, "same input"), writeFixture(t, "same agent")
	for _, tc := range []struct {
		name  string
		archs []string
	}{{"image", []string{"amd64"}}, {"index", []string{"amd64", "arm64"}}} {
		t.Run(tc.name, func(t *testing.T) {
			var platforms []platformBinaries
			for _, arch := range tc.archs {
				platforms = append(platforms, platformBinaries{Arch: arch, Binary: bin, Agent: agent})
			}
			dir := t.TempDir()
			var archives [][]byte
			for _, n := range []string{"a.tar", "b.tar"} {
				o := options{Platforms: platforms, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, n), Created: time.Unix(0, 0)}
				if _, err := build(o); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(o.Out)
				if err != nil {
					t.Fatal(err)
				}
				archives = append(archives, b)
			}
			if !bytes.Equal(archives[0], archives[1]) {
				t.Error("two builds from the same input differ")
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	bin, agent := writeFixture(t, "x"), writeFixture(t, "agent")
	dir := t.TempDir()
	one := func(cni, agent string) []platformBinaries {
		return []platformBinaries{{Arch: "amd64", Binary: cni, Agent: agent}}
	}
	for _, tc := range []struct {
		name    string
		o       options
		wantMsg string
	}{
		{"missing binary", options{Platforms: one(filepath.Join(dir, "nope"), agent), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "no such file"},
		{"missing agent", options{Platforms: one(bin, filepath.Join(dir, "nope")), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "sriov-stable-agent"},
		{"no agent", options{Platforms: one(bin, ""), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "no sriov-stable-agent binary given"},
		{"empty binary", options{Platforms: one(writeFixture(t, ""), agent), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "is empty"},
		{"no platform", options{Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "no platform"},
		{"platform twice", options{Platforms: append(one(bin, agent), one(bin, agent)...), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "linux/amd64 given twice"},
		{"bad reference", options{Platforms: one(bin, agent), Ref: "Not A Ref", Out: filepath.Join(dir, "o.tar")}, "image reference"},
		{"no tag", options{Platforms: one(bin, agent), Ref: "ghcr.io/a/b", Out: filepath.Join(dir, "o.tar")}, "image reference"},
		{"output dir missing", options{Platforms: one(bin, agent), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "no", "o.tar")}, "create archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantMsg)
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed builds left %d files in the output dir", len(ents))
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	for _, tc := range []struct {
		name string
		args []string
		want []platformBinaries
	}{
		{"one platform", []string{"-binary", "b", "-out", "o.tar", "-agent", "a", "-arch", "arm64", "-ref", "ghcr.io/x/y:v1"},
			[]platformBinaries{{Arch: "arm64", Binary: "b", Agent: "a"}}},
		{"host arch by default", []string{"-binary", "b", "-agent", "a", "-out", "o.tar", "-ref", "ghcr.io/x/y:v1"},
			[]platformBinaries{{Arch: runtime.GOARCH, Binary: "b", Agent: "a"}}},
		{"index", []string{"-platform", "linux/amd64=x/cni,x/agent", "-platform", "linux/arm64=y/cni,y/agent", "-out", "o.tar", "-ref", "ghcr.io/x/y:v1"},
			[]platformBinaries{{Arch: "amd64", Binary: "x/cni", Agent: "x/agent"}, {Arch: "arm64", Binary: "y/cni", Agent: "y/agent"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Platforms, tc.want) || o.Out != "o.tar" || o.Ref != "ghcr.io/x/y:v1" || o.Created.Unix() != 1700000000 {
				t.Errorf("parsed %+v, want platforms %+v", o, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"missing -out", []string{"-binary", "b", "-agent", "a"}, "-out"},
		{"missing -agent", []string{"-binary", "b", "-out", "o.tar"}, "-agent"},
		{"platform and binary", []string{"-platform", "linux/arm64=c,a", "-binary", "b", "-out", "o"}, "cannot be combined"},
		{"platform and arch", []string{"-platform", "linux/arm64=c,a", "-arch", "amd64", "-out", "o"}, "cannot be combined"},
		{"platform without agent", []string{"-platform", "linux/arm64=c", "-out", "o"}, "want linux/ARCH=CNI,AGENT"},
		{"platform without arch", []string{"-platform", "linux=c,a", "-out", "o"}, "want linux/ARCH=CNI,AGENT"},
		{"platform not linux", []string{"-platform", "windows/amd64=c,a", "-out", "o"}, "linux only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want it to contain %q", err, tc.wantMsg)
			}
		})
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := parseFlags([]string{"-binary", "b", "-agent", "a", "-out", "o"}, io.Discard); err == nil {
		t.Error("bad SOURCE_DATE_EPOCH accepted")
	}
}

// imageArchs are the platforms `make image` builds, and the ELF machine each
// one's binaries must be for.
var imageArchs = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// realImage is the archive of real binaries TestImageArchive and
// TestArm64UnderQemu inspect, and the host-arch binaries (`make build`'s)
// the host's image must hold.
type realImage struct {
	archive, binary, agent, version string
}

var (
	builtOnce  sync.Once
	builtImage realImage
	builtErr   error
	builtDir   string
)

// imageUnderTest returns the archive `make image` produced (MKIMAGE_ARCHIVE,
// MKIMAGE_BINARY and MKIMAGE_AGENT, set by the Makefile) or, in a plain `go
// test`, cross-builds the real static binaries for every imageArchs platform
// and an archive from them the same way, once for the package's tests.
func imageUnderTest(t *testing.T) realImage {
	t.Helper()
	if archive := os.Getenv("MKIMAGE_ARCHIVE"); archive != "" {
		ri := realImage{archive: archive, binary: os.Getenv("MKIMAGE_BINARY"), agent: os.Getenv("MKIMAGE_AGENT")}
		if ri.binary == "" || ri.agent == "" {
			t.Fatal("MKIMAGE_ARCHIVE needs MKIMAGE_BINARY and MKIMAGE_AGENT: the host binaries the archive must hold")
		}
		return ri
	}
	builtOnce.Do(func() { builtImage, builtErr = buildRealImage() })
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtImage
}

// buildRealImage builds as `make image` does (CGO_ENABLED=0, -trimpath, the
// version stamped in) into builtDir, which TestMain removes.
func buildRealImage() (realImage, error) {
	var err error
	if builtDir, err = os.MkdirTemp("", "mkimage-test-"); err != nil {
		return realImage{}, err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	const module = "github.com/sriov-stable-cni/sriov-stable-cni"
	ri := realImage{archive: filepath.Join(builtDir, "image.tar"), version: "v0.0.0-mkimage-test"}
	var platforms []platformBinaries
	for _, arch := range slices.Sorted(maps.Keys(imageArchs)) {
		p := platformBinaries{Arch: arch, Binary: filepath.Join(builtDir, arch, "sriov-stable-cni"), Agent: filepath.Join(builtDir, arch, "sriov-stable-agent")}
		for out, pkg := range map[string]string{p.Binary: "cmd/sriov-stable-cni", p.Agent: "cmd/sriov-stable-agent"} {
			cmd := exec.Command(goCmd, "build", "-trimpath", "-ldflags", "-X "+module+"/pkg/buildinfo.Version="+ri.version, "-o", out, module+"/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if msg, err := cmd.CombinedOutput(); err != nil {
				return realImage{}, fmt.Errorf("go build %s for %s: %w\n%s", pkg, arch, err, msg)
			}
		}
		if arch == runtime.GOARCH {
			ri.binary, ri.agent = p.Binary, p.Agent
		}
		platforms = append(platforms, p)
	}
	_, err = build(options{Platforms: platforms, Ref: "ghcr.io/sriov-stable-cni/sriov-stable-cni:test", Out: ri.archive,
		Version: ri.version, Created: time.Unix(0, 0)})
	return ri, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// TestImageArchive checks the archive of real binaries (imageUnderTest): an
// image index of exactly linux/amd64 and linux/arm64, each image holding
// static binaries for its own machine and a config saying its arch, the
// host's image holding exactly the host binaries (the cluster e2e compares
// the installed plugin with them). Then it runs the host image's entrypoint
// from the extracted layer, as the DaemonSet's init container does, against
// a temporary bin dir.
func TestImageArchive(t *testing.T) {
	ri := imageUnderTest(t)
	a := inspectArchive(t, ri.archive)
	if a.index == nil {
		t.Fatalf("index.json points at a %s, want an image index", a.top.MediaType)
	}
	want := []string{"linux/amd64", "linux/arm64"}
	if got := slices.Sorted(slices.Values(a.platforms())); !slices.Equal(got, want) {
		t.Fatalf("image index platforms %v, want %v", got, want)
	}
	for arch, machine := range imageArchs {
		img := a.image(t, arch)
		if c := img.config; c.OS != "linux" || c.Architecture != arch {
			t.Errorf("linux/%s image config says %s/%s", arch, c.OS, c.Architecture)
		}
		for _, path := range []string{cniPath, agentPath} {
			checkStaticELF(t, arch+" "+path, img.file(t, path), machine)
		}
	}
	host := a.image(t, runtime.GOARCH)
	for path, src := range map[string]string{cniPath: ri.binary, agentPath: ri.agent} {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		checkBinary(t, host, path, want)
	}
	if host.config.Config.Entrypoint[0] != cniPath {
		t.Fatalf("entrypoint %q does not run %s", host.config.Config.Entrypoint, cniPath)
	}

	// Run the entrypoint as the init container does, with the layer's binary.
	root := t.TempDir()
	exe := filepath.Join(root, "sriov-stable-cni")
	if err := os.WriteFile(exe, host.file(t, cniPath), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(root, "opt-cni-bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(host.config.Config.Entrypoint[1:]), "--cni-bin-dir", binDir)
	cmd := exec.Command(exe, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", exe, args, err, out)
	}
	if !strings.Contains(string(out), "installed "+filepath.Join(binDir, "sriov-stable-cni")) {
		t.Errorf("entrypoint output %q does not report the install", out)
	}
	installed, err := os.ReadFile(filepath.Join(binDir, "sriov-stable-cni"))
	wantBin, _ := os.ReadFile(ri.binary)
	if err != nil || sum(installed) != sum(wantBin) {
		t.Errorf("installed copy: %v, sha256 %s, want %s", err, sum(installed), sum(wantBin))
	}
}

// checkStaticELF asserts b is an ELF executable for machine with no program
// interpreter: statically linked, as CGO_ENABLED=0 builds it.
func checkStaticELF(t *testing.T, what string, b []byte, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s is not ELF: %v", what, err)
		return
	}
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s is an ELF %s for %s, want an executable for %s", what, f.Type, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a program interpreter: not statically linked", what)
		}
	}
}

// qemuAarch64 is the user-mode emulator (Debian's qemu-user-static) the arm64
// binaries run under on another host.
const qemuAarch64 = "/usr/bin/qemu-aarch64-static"

// TestArm64UnderQemu runs the arm64 image's binaries, extracted from the
// archive, under qemu-user: the CNI binary answers CNI_COMMAND=VERSION with
// the versions the plugin supports, the agent prints its version and help.
// Building them needs no emulation (GOARCH); only this check does.
func TestArm64UnderQemu(t *testing.T) {
	if _, err := os.Stat(qemuAarch64); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("%s not installed (apt-get install qemu-user-static): %v", qemuAarch64, err)
		}
		t.Fatalf("CI is set and %s is missing (.ci/run installs qemu-user-static): %v", qemuAarch64, err)
	}
	ri := imageUnderTest(t)
	img := inspectArchive(t, ri.archive).image(t, "arm64")
	dir := t.TempDir()
	extract := func(path string) string {
		exe := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(exe, img.file(t, path), 0o755); err != nil {
			t.Fatal(err)
		}
		return exe
	}
	cni, agent := extract(cniPath), extract(agentPath)
	run := func(env []string, exe string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(qemuAarch64, append([]string{exe}, args...)...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("qemu-aarch64 %s %q (env %q): %v\nstdout: %s\nstderr: %s", filepath.Base(exe), args, env, err, stdout.Bytes(), stderr.Bytes())
		}
		return stdout.String()
	}

	var info struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	out := run([]string{"CNI_COMMAND=VERSION"}, cni)
	unmarshal(t, []byte(out), &info)
	if want := plugin.Versions.SupportedVersions(); info.CNIVersion == "" || !slices.Equal(info.SupportedVersions, want) {
		t.Errorf("CNI_COMMAND=VERSION printed cniVersion %q, supportedVersions %q; want a cniVersion and %q", info.CNIVersion, info.SupportedVersions, want)
	}

	version := img.config.Config.Labels["org.opencontainers.image.version"]
	if out := run(nil, agent, "version"); !strings.HasPrefix(out, "sriov-stable-agent "+version+"\ncommit: ") {
		t.Errorf("agent version printed %q, want sriov-stable-agent %s and its commit", out, version)
	}
	if out := run(nil, agent, "help"); !strings.Contains(out, "sriov-stable-agent monitor") {
		t.Errorf("agent help printed %q, want the command list", out)
	}
}
