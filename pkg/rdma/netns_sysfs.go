package rdma

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A sysfs instance shows the network-namespaced classes (net, infiniband)
// of the netns it was made in, and keeps that netns whatever thread reads
// it later; setns alone does not change what an existing sysfs mount
// shows. So the VF's netns gets a sysfs of its own: its filesystem context
// is made on a thread in that netns (fsopen records the netns then), and
// mounted as a detached mount that belongs to no mount namespace and is
// reached through its file descriptor (/proc/self/fd/N/…). Nothing is
// mounted anywhere, no mount namespace is made, and closing the descriptor
// unmounts it. The instance holds no reference that keeps the netns alive.

// openSysfsContext makes a sysfs filesystem context in the calling
// thread's netns. Run it inside the netns (ns.NetNS.Do).
// Equivalent to the first half of: ip netns exec $ns mount -t sysfs sysfs $dir
func openSysfsContext() (int, error) {
	fd, err := unix.Fsopen("sysfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen sysfs: %w", err)
	}
	return fd, nil
}

// mountContext creates the superblock of a context from openSysfsContext
// and mounts it detached, read-only; it closes the context.
func mountContext(fsfd int) (*os.File, error) {
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("create sysfs superblock: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC,
		unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsmount sysfs: %w", err)
	}
	return os.NewFile(uintptr(mfd), "sysfs"), nil
}
