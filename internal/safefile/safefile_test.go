package safefile_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
)

const limit = 1 << 20

func write(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadFileRegular(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 70000, limit} {
		want := []byte(strings.Repeat("x", n))
		got, err := safefile.ReadFile(write(t, filepath.Join(dir, "f"), want), limit)
		if err != nil || string(got) != string(want) {
			t.Errorf("%d bytes: read %d bytes, err %v", n, len(got), err)
		}
	}
	// Through a directory that is a link, as sysfs's bus/pci/devices/<pci>.
	sub := filepath.Join(dir, "real")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "attr"), []byte("4: ACTIVE\n"))
	safefiletest.Symlink(t, "real", filepath.Join(dir, "link"))
	if got, err := safefile.ReadFile(filepath.Join(dir, "link", "attr"), 4096); err != nil || string(got) != "4: ACTIVE\n" {
		t.Errorf("through a linked directory: %q, %v", got, err)
	}
	if _, err := safefile.ReadFile(filepath.Join(dir, "absent"), limit); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent file: %v, want fs.ErrNotExist", err)
	}
}

// A sysfs attribute reports st_size 4096 whatever it holds; the value is
// read whole, and the page cap is not exceeded by the size stat reports.
func TestReadFileSysfsAttribute(t *testing.T) {
	const path = "/sys/class/net/lo/mtu"
	st, err := os.Stat(path)
	if err != nil {
		t.Skipf("no sysfs here: %v", err)
	}
	got, err := safefile.ReadFile(path, 4096)
	if err != nil || strings.TrimSpace(string(got)) == "" || int64(len(got)) >= st.Size() {
		t.Errorf("read %q (err %v) from %s, whose stat size is %d", got, err, path, st.Size())
	}
}

func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	safefiletest.FIFO(t, fifo)
	link := filepath.Join(dir, "zero.json")
	safefiletest.Symlink(t, "/dev/zero", link)
	regular := write(t, filepath.Join(dir, "regular"), []byte("{}"))
	toRegular := filepath.Join(dir, "to-regular.json")
	safefiletest.Symlink(t, regular, toRegular)
	junk := filepath.Join(dir, "junk.json")
	safefiletest.Sparse(t, junk, 100<<20)
	over := write(t, filepath.Join(dir, "over"), make([]byte, limit+1))
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	for _, tc := range []struct {
		name, path string
		want       error
		says       string
	}{
		{"FIFO", fifo, safefile.ErrNotRegular, fifo + " is a FIFO, not a regular file"},
		{"link to /dev/zero", link, safefile.ErrNotRegular, link + " is a symbolic link to /dev/zero, not a regular file"},
		{"link to a regular file", toRegular, safefile.ErrNotRegular, "is a symbolic link to " + regular},
		{"/dev/zero", "/dev/zero", safefile.ErrNotRegular, "/dev/zero is a character device, not a regular file"},
		{"directory", dir, safefile.ErrNotRegular, dir + " is a directory, not a regular file"},
		{"socket", sock, safefile.ErrNotRegular, sock + " is a socket, not a regular file"},
		{"100 MB sparse", junk, safefile.ErrTooLarge, junk + " is larger than 1 MiB"},
		{"one byte over", over, safefile.ErrTooLarge, over + " is larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			var err error
			safefiletest.Within(t, safefiletest.Prompt, "ReadFile", func() { got, err = safefile.ReadFile(tc.path, limit) })
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || got != nil {
				t.Errorf("ReadFile(%s) = %d bytes, %v; want %v saying %q", tc.path, len(got), err, tc.want, tc.says)
			}
		})
	}
}

// The operator's files (a spec) may be links; what they lead to must still
// be a regular file.
func TestReadFileFollow(t *testing.T) {
	dir := t.TempDir()
	regular := write(t, filepath.Join(dir, "node.yaml"), []byte("vfs: 8\n"))
	link := filepath.Join(dir, "link.yaml")
	safefiletest.Symlink(t, regular, link)
	if got, err := safefile.ReadFileFollow(link, limit); err != nil || string(got) != "vfs: 8\n" {
		t.Errorf("through a link: %q, %v", got, err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	safefiletest.FIFO(t, fifo)
	toFIFO := filepath.Join(dir, "to-fifo.yaml")
	safefiletest.Symlink(t, fifo, toFIFO)
	zero := filepath.Join(dir, "zero.yaml")
	safefiletest.Symlink(t, "/dev/zero", zero)
	for path, says := range map[string]string{
		fifo:   fifo + " is a FIFO, not a regular file",
		toFIFO: toFIFO + " is a symbolic link to " + fifo + ", a FIFO, not a regular file",
		zero:   zero + " is a symbolic link to /dev/zero, a character device, not a regular file",
	} {
		var err error
		safefiletest.Within(t, safefiletest.Prompt, "ReadFileFollow", func() { _, err = safefile.ReadFileFollow(path, limit) })
		if !errors.Is(err, safefile.ErrNotRegular) || err.Error() != says {
			t.Errorf("ReadFileFollow(%s): %v, want ErrNotRegular saying %q", path, err, says)
		}
	}
}

// A refusal costs no more than os.ReadFile's read of a good file, and a
// read of a good file no more allocations than os.ReadFile's: the plugin
// reads a dozen sysfs attributes per ADD.
func TestReadFileAllocations(t *testing.T) {
	path := write(t, filepath.Join(t.TempDir(), "attr"), []byte("b83f:d203:00aa:0100\n"))
	ours := testing.AllocsPerRun(100, func() { _, _ = safefile.ReadFile(path, 4096) })
	std := testing.AllocsPerRun(100, func() { _, _ = os.ReadFile(path) })
	if ours > std {
		t.Errorf("ReadFile allocates %v times per read, os.ReadFile %v", ours, std)
	}
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "state")
	safefiletest.FIFO(t, fifo)
	var err error
	safefiletest.Within(t, safefiletest.Prompt, "Open", func() { _, err = safefile.Open(fifo) })
	if !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("Open(FIFO): %v, want ErrNotRegular", err)
	}
	safefiletest.Within(t, safefiletest.Prompt, "OpenFile", func() { _, err = safefile.OpenFile(fifo, os.O_RDWR|os.O_CREATE, 0o600) })
	if !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("OpenFile(FIFO, O_RDWR|O_CREATE): %v, want ErrNotRegular", err)
	}

	// A dangling link is not created through.
	target := filepath.Join(dir, "elsewhere")
	lock := filepath.Join(dir, "x.lock")
	safefiletest.Symlink(t, target, lock)
	if f, err := safefile.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("OpenFile(dangling link, O_CREATE): %v, want ErrNotRegular", err)
		f.Close()
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}

	created := filepath.Join(dir, "new.lock")
	f, err := safefile.OpenFile(created, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("create a lock file: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("owner x.json\n"), 0); err != nil {
		t.Errorf("write through the opened file: %v", err)
	}
	if st, err := f.Stat(); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("created with %v (%v), want 0600", st.Mode(), err)
	}
}

// TestReadFileReadsAtMostTheCap: of a 100 MB file, ReadFile reads the cap
// and one byte, not the file: the kernel's count of bytes this process
// read (rchar) grows by that much, plus the read of the count itself.
func TestReadFileReadsAtMostTheCap(t *testing.T) {
	junk := filepath.Join(t.TempDir(), "junk.json")
	safefiletest.Sparse(t, junk, 100<<20)
	before := rchar(t)
	if _, err := safefile.ReadFile(junk, limit); !errors.Is(err, safefile.ErrTooLarge) {
		t.Fatalf("ReadFile of 100 MB: %v, want ErrTooLarge", err)
	}
	if read := rchar(t) - before; read < limit+1 || read > limit+1+4096 {
		t.Errorf("read %d bytes of a 100 MB file with a cap of %d", read, limit)
	}
}

// rchar is how many bytes this process has read, from /proc/self/io.
func rchar(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no I/O accounting here: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no rchar in /proc/self/io:\n%s", b)
	return 0
}
