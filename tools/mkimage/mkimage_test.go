package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
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

// image is what inspectArchive found.
type image struct {
	index    ociIndex
	manifest ociManifest
	config   ociConfig
	files    map[string]layerEntry // layer path (no leading slash) → entry
}

// inspectArchive opens an OCI layout tar archive, checks every blob against
// its digest and size and the media types, and returns the single image.
func inspectArchive(t testing.TB, path string) image {
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
			break
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
	var img image
	unmarshal(t, entries["index.json"], &img.index)
	if len(img.index.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(img.index.Manifests))
	}
	md := img.index.Manifests[0]
	if md.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("manifest media type %q", md.MediaType)
	}
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
	o := options{Binary: cni, Agent: agent, Ref: "registry.example/team/sriov-stable-cni:v1.2.3", Out: out,
		Arch: "arm64", Version: "v1.2.3", Created: time.Unix(1700000000, 0).UTC()}
	digest, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	img := inspectArchive(t, out)

	if got := img.index.Manifests[0].Digest; got != digest.String() {
		t.Errorf("index points at %s, build returned %s", got, digest)
	}
	ann := img.index.Manifests[0].Annotations
	if ann[annotationRefName] != "v1.2.3" || ann[annotationContainerdName] != "registry.example/team/sriov-stable-cni:v1.2.3" {
		t.Errorf("index annotations %v", ann)
	}
	if p := img.index.Manifests[0].Platform; p == nil || p.OS != "linux" || p.Architecture != "arm64" {
		t.Errorf("index platform %+v, want linux/arm64", p)
	}
	c := img.config
	if c.OS != "linux" || c.Architecture != "arm64" {
		t.Errorf("config platform %s/%s", c.OS, c.Architecture)
	}
	if want := []string{"/usr/bin/sriov-stable-cni", "install"}; !slices.Equal(c.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", c.Config.Entrypoint, want)
	}
	if want := []string{"--cni-bin-dir", "/host/opt/cni/bin", "--wait"}; !slices.Equal(c.Config.Cmd, want) {
		t.Errorf("cmd %q, want %q", c.Config.Cmd, want)
	}
	if c.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("labels %v", c.Config.Labels)
	}
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

func TestArchiveIsReproducible(t *testing.T) {
	bin, agent := writeFixture(t, "same input"), writeFixture(t, "same agent")
	dir := t.TempDir()
	var archives [][]byte
	for _, n := range []string{"a.tar", "b.tar"} {
		o := options{Binary: bin, Agent: agent, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, n), Arch: "amd64", Created: time.Unix(0, 0)}
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
}

func TestBuildErrors(t *testing.T) {
	bin, agent := writeFixture(t, "x"), writeFixture(t, "agent")
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		o       options
		wantMsg string
	}{
		{"missing binary", options{Binary: filepath.Join(dir, "nope"), Agent: agent, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "no such file"},
		{"missing agent", options{Binary: bin, Agent: filepath.Join(dir, "nope"), Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "sriov-stable-agent"},
		{"no agent", options{Binary: bin, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "no sriov-stable-agent binary given"},
		{"empty binary", options{Binary: writeFixture(t, ""), Agent: agent, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "o.tar")}, "is empty"},
		{"bad reference", options{Binary: bin, Agent: agent, Ref: "Not A Ref", Out: filepath.Join(dir, "o.tar")}, "image reference"},
		{"no tag", options{Binary: bin, Agent: agent, Ref: "ghcr.io/a/b", Out: filepath.Join(dir, "o.tar")}, "image reference"},
		{"output dir missing", options{Binary: bin, Agent: agent, Ref: "ghcr.io/a/b:dev", Out: filepath.Join(dir, "no", "o.tar")}, "create archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Arch = "amd64"
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
	o, err := parseFlags([]string{"-binary", "b", "-out", "o.tar", "-agent", "a", "-ref", "ghcr.io/x/y:v1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Binary != "b" || o.Out != "o.tar" || o.Agent != "a" || o.Ref != "ghcr.io/x/y:v1" || o.Created.Unix() != 1700000000 {
		t.Errorf("parsed %+v", o)
	}
	if _, err := parseFlags([]string{"-binary", "b", "-agent", "a"}, io.Discard); err == nil {
		t.Error("missing -out accepted")
	}
	if _, err := parseFlags([]string{"-binary", "b", "-out", "o.tar"}, io.Discard); err == nil {
		t.Error("missing -agent accepted")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := parseFlags([]string{"-binary", "b", "-agent", "a", "-out", "o"}, io.Discard); err == nil {
		t.Error("bad SOURCE_DATE_EPOCH accepted")
	}
}

// TestImageArchive checks the archive `make image` produced (MKIMAGE_ARCHIVE
// and MKIMAGE_BINARY, set by the Makefile) or, in a plain `go test`, builds
// the real static binary and an archive from it the same way. Either way it
// then runs the image's entrypoint from the extracted layer, as the
// DaemonSet's init container does, against a temporary bin dir.
func TestImageArchive(t *testing.T) {
	archive, binary, agentBin := os.Getenv("MKIMAGE_ARCHIVE"), os.Getenv("MKIMAGE_BINARY"), os.Getenv("MKIMAGE_AGENT")
	if archive == "" {
		dir := t.TempDir()
		binary, agentBin = filepath.Join(dir, "sriov-stable-cni"), filepath.Join(dir, "sriov-stable-agent")
		goCmd, err := exec.LookPath("go")
		if err != nil {
			goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		for out, pkg := range map[string]string{binary: "cmd/sriov-stable-cni", agentBin: "cmd/sriov-stable-agent"} {
			cmd := exec.Command(goCmd, "build", "-trimpath", "-o", out, "github.com/sriov-stable-cni/sriov-stable-cni/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
			}
		}
		archive = filepath.Join(dir, "image.tar")
		if _, err := build(options{Binary: binary, Agent: agentBin, Ref: "ghcr.io/sriov-stable-cni/sriov-stable-cni:test", Out: archive,
			Arch: runtime.GOARCH, Created: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if binary == "" || agentBin == "" {
		t.Fatal("MKIMAGE_ARCHIVE needs MKIMAGE_BINARY and MKIMAGE_AGENT: the binaries the archive must hold")
	}
	img := inspectArchive(t, archive)
	for path, src := range map[string]string{cniPath: binary, agentPath: agentBin} {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		checkBinary(t, img, path, want)
	}
	if img.config.Config.Entrypoint[0] != cniPath {
		t.Fatalf("entrypoint %q does not run %s", img.config.Config.Entrypoint, cniPath)
	}

	// Run the entrypoint as the init container does, with the layer's binary.
	root := t.TempDir()
	exe := filepath.Join(root, "sriov-stable-cni")
	if err := os.WriteFile(exe, img.files[strings.TrimPrefix(cniPath, "/")].content, 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(root, "opt-cni-bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(img.config.Config.Entrypoint[1:]), "--cni-bin-dir", binDir)
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
	want, _ := os.ReadFile(binary)
	if err != nil || sum(installed) != sum(want) {
		t.Errorf("installed copy: %v, sha256 %s, want %s", err, sum(installed), sum(want))
	}
}
