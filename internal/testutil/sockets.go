package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NetlinkSockets counts the netlink sockets process pid holds open,
// whichever network namespace each was made in: every descriptor that is a
// socket is copied with pidfd_getfd(2) and asked its domain. (ss and
// /proc/PID/net/netlink list only the sockets of one netns.) The test or
// bench must be allowed to ptrace pid: root, or pid its own.
func NetlinkSockets(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	n := 0
	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "socket:") {
			continue // closed meanwhile, or not a socket
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		copied, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			continue // closed meanwhile
		}
		domain, err := unix.GetsockoptInt(copied, unix.SOL_SOCKET, unix.SO_DOMAIN)
		unix.Close(copied)
		if err == nil && domain == unix.AF_NETLINK {
			n++
		}
	}
	return n, nil
}
