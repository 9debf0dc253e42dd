package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// unpack reads a bundle back with Read: name → content, and tar order.
func unpack(t *testing.T, b []byte) (map[string][]byte, []string) {
	t.Helper()
	files, order, err := Read(bytes.NewReader(b), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return files, order
}

// node is a fixture DGX H200 with a state directory holding a record and
// hostile files, .link files beside a link to a file outside, a log and a
// metrics endpoint.
type node struct {
	dgx                        *sysfstest.DGXNode
	stateDir, linkDir, logFile string
	metrics                    string
	secret                     string
}

func newNode(t *testing.T) *node {
	n := &node{dgx: sysfstest.NewDGXH200(t), stateDir: t.TempDir(), linkDir: t.TempDir()}
	vf := n.dgx.PFs[0].VFs[0]
	if err := state.NewStore(n.stateDir).Save(&state.Record{Network: "ib-vf", ContainerID: "c1", IfName: "net1", PCI: vf.PCI,
		PodNamespace: "train", PodName: "nccl-0", PodUID: "u1", NodeGUID: vf.NodeGUID}); err != nil {
		t.Fatal(err)
	}
	// A FIFO named like a record: read, it would block forever.
	if err := unix.Mkfifo(filepath.Join(n.stateDir, "attachments", "wedge.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.secret = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(n.secret, []byte("service-account-token-must-not-leak"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(n.secret, filepath.Join(n.linkDir, "90-evil.link")); err != nil {
		t.Fatal(err)
	}
	// A subdirectory of the state directory that links elsewhere.
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "creds.json"), []byte(`{"token":"service-account-token-must-not-leak"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(n.stateDir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.linkDir, "10-sriov-vf.link"), []byte("[Match]\nPath=pci-0000:18:00.2\n[Link]\nName=ibp24s0v0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 3 MiB of log: only the last MiB goes in, from a line's start.
	n.logFile = filepath.Join(t.TempDir(), "sriov-stable-cni.log")
	var log bytes.Buffer
	for i := 0; log.Len() < 3<<20; i++ {
		log.WriteString(strings.Repeat("x", 90) + " line\n")
	}
	log.WriteString("the last line\n")
	if err := os.WriteFile(n.logFile, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "# TYPE sriov_stable_sweeps_total counter\nsriov_stable_sweeps_total 7\n")
	}))
	t.Cleanup(srv.Close)
	n.metrics = srv.URL + "/metrics"
	return n
}

func (n *node) options() Options {
	return Options{SysfsRoot: n.dgx.Root, StateDir: n.stateDir, LinkDir: n.linkDir, MetricsURL: n.metrics, Logs: []string{n.logFile},
		Doctor: &doctor.Options{KernelLog: "", StateDir: n.stateDir}}
}

// The bundle holds what docs/support-bundle.md lists, read as untrusted: the
// FIFO record and the link to a file outside are named as not collected,
// never read; the log's end only; the manifest lists every entry with its
// size, last.
func TestBundle(t *testing.T) {
	n := newNode(t)
	var out bytes.Buffer
	done := make(chan struct{})
	var man *Manifest
	var err error
	go func() {
		defer close(done)
		man, err = Write(context.Background(), &out, n.options())
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write did not return within 30 s (a FIFO read?)")
	}
	if err != nil {
		t.Fatal(err)
	}
	files, order := unpack(t, out.Bytes())
	for _, want := range []string{"version.txt", "doctor.json", "sysfs/functions.json", "state/attachments", "links/10-sriov-vf.link",
		"metrics.txt", "logs/"} {
		if !slices.ContainsFunc(order, func(name string) bool { return strings.HasPrefix(name, want) }) {
			t.Errorf("no entry %s*: %v", want, order)
		}
	}
	if order[len(order)-1] != "MANIFEST.json" {
		t.Errorf("last entry %s, want MANIFEST.json", order[len(order)-1])
	}
	var onDisk Manifest
	if err := json.Unmarshal(files["MANIFEST.json"], &onDisk); err != nil {
		t.Fatal(err)
	}
	if len(onDisk.Entries) != len(order) {
		t.Errorf("manifest lists %d entries, the tar holds %d", len(onDisk.Entries), len(order))
	}
	for _, e := range onDisk.Entries {
		if e.Name != "MANIFEST.json" && len(files[e.Name]) != e.Bytes {
			t.Errorf("manifest: %s has %d bytes, the tar %d", e.Name, e.Bytes, len(files[e.Name]))
		}
	}
	problems := strings.Join(man.Problems, "\n")
	for _, want := range []string{"wedge.json is a FIFO", "90-evil.link is a symbolic link", "linked: not a directory of the state directory"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems do not say %q:\n%s", want, problems)
		}
	}
	for name, data := range files {
		if bytes.Contains(data, []byte("service-account-token-must-not-leak")) {
			t.Errorf("%s holds the file the link pointed at", name)
		}
	}

	var fns []function
	if err := json.Unmarshal(files["sysfs/functions.json"], &fns); err != nil {
		t.Fatal(err)
	}
	vfs, guids := 0, 0
	for _, f := range fns {
		if f.PF != "" {
			vfs++
		}
		for _, d := range f.RDMA {
			if d.NodeGUID != "" && len(d.Ports) > 0 && d.Ports[0].LinkLayer != "" && d.Ports[0].State != "" {
				guids++
			}
		}
	}
	if want := len(n.dgx.PFs) * len(n.dgx.PFs[0].VFs); vfs != want || guids != want+len(n.dgx.PFs) {
		t.Errorf("functions.json: %d VFs and %d RDMA devices with GUID, port state and link layer; want %d and %d", vfs, guids, want, want+len(n.dgx.PFs))
	}
	vf := n.dgx.PFs[0].VFs[0]
	if !bytes.Contains(files["sysfs/functions.json"], []byte(vf.NodeGUID)) {
		t.Errorf("functions.json does not show VF %s's node GUID %s", vf.PCI, vf.NodeGUID)
	}

	var logName string
	for _, name := range order {
		if strings.HasPrefix(name, "logs/") {
			logName = name
		}
	}
	log := files[logName]
	if len(log) > maxLogTail || !bytes.HasSuffix(log, []byte("the last line\n")) || !bytes.HasPrefix(log, []byte("xxx")) {
		t.Errorf("log entry: %d bytes (at most %d), from a whole line to the last: %q…%q", len(log), maxLogTail, log[:min(len(log), 20)], log[max(len(log)-20, 0):])
	}
	if !slices.ContainsFunc(onDisk.Entries, func(e Entry) bool { return e.Name == logName && e.Truncated }) {
		t.Errorf("the log's entry is not marked truncated")
	}
	if !bytes.Contains(files["metrics.txt"], []byte("sriov_stable_sweeps_total 7")) {
		t.Errorf("metrics.txt: %q", files["metrics.txt"])
	}
	if !bytes.Contains(files["doctor.json"], []byte(`"findings"`)) {
		t.Errorf("doctor.json: %.200s", files["doctor.json"])
	}
}

// Past the size bound an entry is left out and named, not cut: the bundle
// stays within it.
func TestBundleBounded(t *testing.T) {
	n := newNode(t)
	opts := n.options()
	opts.MaxBytes = 64 << 10
	var out bytes.Buffer
	man, err := Write(context.Background(), &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := unpack(t, out.Bytes())
	total := 0
	for name, data := range files {
		if name != "MANIFEST.json" {
			total += len(data)
		}
	}
	if total > 64<<10 {
		t.Errorf("%d bytes of entries, over the 64 KiB bound", total)
	}
	if !slices.ContainsFunc(man.Problems, func(p string) bool { return strings.Contains(p, "size limit") }) {
		t.Errorf("nothing left out for the size limit: %v", man.Problems)
	}
	if _, ok := files["version.txt"]; !ok {
		t.Errorf("the small entries before the bound are in: %v", man.Entries)
	}
}

// The netlink part shows the netns's links (name, altname, MAC) and says
// when RDMA netlink has nothing to show; it runs in a netns of the test's.
func TestBundleNetlink(t *testing.T) {
	testutil.RequireRoot(t, "creates a network namespace and a link in it")
	netns := testutil.NewNetns(t)
	var out bytes.Buffer
	var man *Manifest
	err := netns.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = "bundle0"
		la.HardwareAddr = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
		d := &netlink.Veth{LinkAttrs: la, PeerName: "bundle1"}
		if err := netlink.LinkAdd(d); err != nil {
			return err
		}
		if err := netlink.LinkAddAltName(d, "vf-0000-18-00.2"); err != nil {
			return err
		}
		var err error
		man, err = Write(context.Background(), &out, Options{Netlink: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := unpack(t, out.Bytes())
	var links []link
	if err := json.Unmarshal(files["netlink/links.json"], &links); err != nil {
		t.Fatalf("netlink/links.json: %v (problems %v)", err, man.Problems)
	}
	i := slices.IndexFunc(links, func(l link) bool { return l.Name == "bundle0" })
	if i < 0 || links[i].MAC != "02:00:00:00:00:42" || !slices.Contains(links[i].AltNames, "vf-0000-18-00.2") || links[i].Type != "veth" {
		t.Errorf("links: %+v", links)
	}
	if _, ok := files["netlink/rdma.json"]; !ok && !slices.ContainsFunc(man.Problems, func(p string) bool { return strings.HasPrefix(p, "netlink RDMA") }) {
		t.Errorf("neither netlink/rdma.json nor a problem saying why not: %v", man.Problems)
	}
}

// Read takes back what Write writes and refuses what it never writes: a
// link, a path out of the bundle, more than its limit.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		what string
		hdr  tar.Header
		want string
	}{
		{"a path climbing out", tar.Header{Name: "../etc/cron.d/x", Typeflag: tar.TypeReg, Size: 1}, "not a plain file"},
		{"an absolute path", tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Size: 1}, "not a plain file"},
		{"a link", tar.Header{Name: "state/x.json", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}, "not a plain file"},
		{"too big", tar.Header{Name: "metrics.txt", Typeflag: tar.TypeReg, Size: 100}, "over the 10 left"},
	} {
		var b bytes.Buffer
		gz := gzip.NewWriter(&b)
		tw := tar.NewWriter(gz)
		hdr := tc.hdr
		hdr.Mode = 0o644
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(bytes.Repeat([]byte("x"), int(hdr.Size))); err != nil {
			t.Fatal(err)
		}
		tw.Close()
		gz.Close()
		if _, _, err := Read(&b, 10); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Read error %v, want %q", tc.what, err, tc.want)
		}
	}
}
