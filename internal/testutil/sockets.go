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
	return netlinkSockets(pid, false)
}

// NetlinkSocketsElsewhere counts the netlink sockets process pid holds
// that were made in a network namespace other than its own (SIOCGSKNS):
// the agent's one per pod netns, without the port watcher's in the host's.
func NetlinkSocketsElsewhere(pid int) (int, error) {
	return netlinkSockets(pid, true)
}

func netlinkSockets(pid int, elsewhere bool) (int, error) {
	var own unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &own); err != nil {
		return 0, err
	}
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
		if err == nil && domain == unix.AF_NETLINK && (!elsewhere || !inNetns(copied, own)) {
			n++
		}
		unix.Close(copied)
	}
	return n, nil
}

// inNetns reports whether socket fd was made in the network namespace of
// inode ns (false when that cannot be asked).
func inNetns(fd int, ns unix.Stat_t) bool {
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return false
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	return unix.Fstat(nsfd, &st) == nil && st.Ino == ns.Ino && st.Dev == ns.Dev
}
