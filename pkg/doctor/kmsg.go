package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// maxKmsgRecords bounds a /dev/kmsg read: the ring buffer holds far fewer,
// and a log flooded while we read must not keep us reading forever.
const maxKmsgRecords = 1 << 20

// maxKernelLogText caps what is read of a kernel log given as a text file
// (dmesg's output, /var/log/kern.log): its last 16 MiB.
const maxKernelLogText = 16 << 20

// readKernelLog returns the kernel log's lines: from /dev/kmsg (or any
// character device speaking its record protocol) read without blocking, or
// from a text file as dmesg, journalctl -k or /var/log/kern.log write it.
func readKernelLog(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	if st.Mode()&os.ModeCharDevice != 0 {
		return readKmsg(path)
	}
	f, size, err := safefile.OpenFollow(path)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	defer f.Close()
	var r io.Reader = io.LimitReader(f, maxKernelLogText)
	if size > maxKernelLogText {
		// Its end holds the newest messages: read that, from the first
		// whole line.
		if _, err := f.Seek(size-maxKernelLogText, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read kernel log %s: %w", path, err)
		}
		br := bufio.NewReader(io.LimitReader(f, maxKernelLogText))
		if _, err := br.ReadString('\n'); err != nil {
			return nil, fmt.Errorf("read kernel log %s: no line in its last %d bytes: %w", path, maxKernelLogText, err)
		}
		r = br
	}
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kernel log %s: %w", path, err)
	}
	return lines, nil
}

// readKmsg reads every record in the kernel's ring buffer. Each read(2) on
// /dev/kmsg returns one record, "prio,seq,usec,flags;message\n" followed by
// " KEY=value" continuation lines; EAGAIN means the buffer is drained and
// EPIPE that records were overwritten under us (go on). It uses raw
// syscalls: an *os.File would park a non-blocking read in the poller and
// wait for the next message instead of returning.
func readKmsg(path string) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 16*1024) // a record is at most ~8 KiB with its dictionary
	var lines []string
	for i := 0; i < maxKmsgRecords; i++ {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return lines, nil
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return lines, nil
		}
		rec := string(buf[:n])
		if i := strings.IndexByte(rec, '\n'); i >= 0 {
			rec = rec[:i]
		}
		lines = append(lines, rec)
	}
	return lines, nil
}
