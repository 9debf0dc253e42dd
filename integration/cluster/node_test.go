//go:build clustere2e

package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// The node's addresses, all inside the run's network namespace: the node IP
// (on lo: kubelet wants a node IP that is not a loopback address), the pod
// network behind the bridge, and the service range (routed to lo; kube-proxy
// translates the kubernetes Service's ClusterIP).
// Documentation and benchmarking ranges, so they cannot collide with
// anything real.
const (
	nodeName    = "sriov-e2e-node"
	nodeIP      = "192.0.2.10"
	podSubnet   = "198.18.0.0/24"
	serviceCIDR = "198.19.0.0/24"
	// runDir holds the cluster's own files: PKI, configurations, the
	// fixture sysfs, etcd's data (tmpfs, in the run's mount namespace).
	runDir = "/run/sriov-e2e"
)

// node is the fixture DGX H200 node the cluster runs on.
type node struct {
	dgx       *sysfstest.DGXNode
	vfs       []sysfstest.DGXVF            // every VF, in PF order
	standIns  map[string]*testutil.StandIn // by VF PCI address
	macs      map[string]string            // the stand-ins' MACs, by VF PCI address
	zeroGUID  sysfstest.DGXVF              // the VF whose node GUID is zero (scenario 4)
	logDir    string                       // on the host: survives the run
	varLogDir string                       // bind-mounted over /var/log
}

// setupNode makes the run's mount namespace look like a DGX H200 node and
// its network namespace hold the VFs' stand-ins. Only this namespace sees
// any of it.
func setupNode(tb *harness.ProgramTB) (*node, error) {
	n := &node{standIns: map[string]*testutil.StandIn{}, macs: map[string]string{}, logDir: filepath.Join(*workDir, "logs"),
		varLogDir: filepath.Join(*workDir, "var-log")}
	if err := recordNamespaces(); err != nil {
		return nil, err
	}
	if err := privateDirs(n); err != nil {
		return nil, err
	}
	if err := nodeAddress(); err != nil {
		return nil, err
	}
	if err := buildFixture(tb, n); err != nil {
		return nil, err
	}
	if err := mountFixture(n.dgx.Root); err != nil {
		return nil, err
	}
	for _, vf := range n.vfs {
		// With the stable altname, as the host's .link files give it
		// (hostconfig): a veth has no parent PCI device to be found by.
		n.standIns[vf.PCI] = testutil.NewStandIn(tb, vf.NetDev, vf.PCI, true)
		n.macs[vf.PCI] = testutil.HostLink(vf.NetDev).Attrs().HardwareAddr.String()
	}
	if err := makeCgroupRoot(); err != nil {
		return nil, err
	}
	return n, nil
}

// recordNamespaces writes this stage's namespace links for the host check.
func recordNamespaces() error {
	var links []string
	for _, kind := range []string{"net", "mnt", "pid"} {
		l, err := os.Readlink("/proc/self/ns/" + kind)
		if err != nil {
			return err
		}
		links = append(links, l)
	}
	return os.WriteFile(filepath.Join(*workDir, namespacesFile), []byte(strings.Join(links, "\n")+"\n"), 0o644)
}

// privateDirs hides the host's state directories behind private ones in
// this mount namespace: tmpfs over /run (containerd's state, pod netns, the
// plugin's records, device info files), /var/lib (kubelet, containerd, CNI
// caches) and /opt (the node's CNI bin dir); a directory of the work dir
// over /var/log (pod logs, kept for the artifacts).
func privateDirs(n *node) error {
	for _, dir := range []string{"/run", "/var/lib", "/opt", "/var/log"} {
		if err := detachMounts(dir); err != nil {
			return err
		}
	}
	for _, dir := range []string{"/run", "/var/lib", "/opt"} {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=755"); err != nil {
			return fmt.Errorf("mount a private tmpfs on %s: %w", dir, err)
		}
	}
	for _, dir := range []string{n.logDir, n.varLogDir, "/opt/cni/bin", runDir, filepath.Join(runDir, "tmp")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(n.varLogDir, "/var/log", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over /var/log: %w", n.varLogDir, err)
	}
	// Temporary directories (the fixture, stand-in netns helpers) go to the
	// tmpfs, never to the host's /tmp.
	return os.Setenv("TMPDIR", filepath.Join(runDir, "tmp"))
}

// detachMounts detaches (in this mount namespace only: it is private) every
// mount at or under dir. The host's stay in the mount table when merely
// covered, and the runtime looks mounts up by mount point: a covered
// private /run/netns of the host would be taken for the node's, which a
// pod with HostToContainer propagation needs shared.
func detachMounts(dir string) error {
	mounts, err := hostMounts()
	if err != nil {
		return err
	}
	var points []string
	for m := range mounts {
		point, _, _ := strings.Cut(m, " ")
		if point == dir || strings.HasPrefix(point, dir+"/") {
			points = append(points, point)
		}
	}
	// Deepest first; a detached parent takes its children along.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		// Until no mount is left there: mounts can be stacked.
		for {
			err := unix.Unmount(p, unix.MNT_DETACH)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break
			}
			if err != nil {
				return fmt.Errorf("detach %s: %w", p, err)
			}
		}
	}
	return nil
}

// nodeAddress brings lo up with the node IP on it, and routes the service
// range there: a real node's default route covers ClusterIPs, so that a
// connection from the node itself gets as far as kube-proxy's output
// rules, which translate it (without a route, connect fails before any
// rule sees it). Pods need no such route: their packets are translated as
// they arrive on the bridge, before routing.
func nodeAddress() error {
	lo, err := netlinksafe.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(nodeIP), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(lo, addr); err != nil {
		return fmt.Errorf("add the node IP %s to lo: %w", nodeIP, err)
	}
	_, services, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return err
	}
	route := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: services, Src: net.ParseIP(nodeIP), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("route the service range %s to lo: %w", serviceCIDR, err)
	}
	return nil
}

// buildFixture builds the DGX H200 fixture with one broken VF: the last VF
// of the last PF has a zero node and port GUID (scenario 4).
func buildFixture(tb *harness.ProgramTB, n *node) error {
	n.dgx = sysfstest.NewDGXH200(tb)
	for _, pf := range n.dgx.PFs {
		n.vfs = append(n.vfs, pf.VFs...)
	}
	n.zeroGUID = n.vfs[len(n.vfs)-1]
	const zero = "0000:0000:0000:0000"
	n.dgx.SetRDMA(n.zeroGUID.PCI, sysfstest.RDMA{Name: n.zeroGUID.RDMA, NodeGUID: zero, FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(zero)}}})
	// The overlay on /sys/class (mountFixture) takes a layer holding just
	// class/infiniband: move it to sysclass/infiniband, at the same depth so
	// its relative links still resolve, and leave a link in its place.
	class := filepath.Join(n.dgx.Root, "class", "infiniband")
	layer := filepath.Join(n.dgx.Root, "sysclass")
	if err := os.MkdirAll(layer, 0o755); err != nil {
		return err
	}
	if err := os.Rename(class, filepath.Join(layer, "infiniband")); err != nil {
		return err
	}
	return os.Symlink(filepath.Join("..", "sysclass", "infiniband"), class)
}

// mountFixture shows the fixture as this node's PCI devices and RDMA
// devices: bind mounts over /sys/devices/pci0000:00 (where the relative
// links of bus/pci/devices and class/infiniband lead), /sys/bus/pci/devices
// and /sys/bus/pci/drivers, and read-only overlays adding class/infiniband
// and the fixture's modules to the real /sys/class and /sys/module (the
// kernel here has neither an InfiniBand class nor mlx5). Everything else
// under /sys (cgroups, the real network devices) stays the kernel's.
func mountFixture(root string) error {
	for _, b := range [][2]string{
		{"devices/pci0000:00", "/sys/devices/pci0000:00"},
		{"bus/pci/devices", "/sys/bus/pci/devices"},
		{"bus/pci/drivers", "/sys/bus/pci/drivers"},
	} {
		if err := unix.Mount(filepath.Join(root, b[0]), b[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the fixture's %s over %s: %w", b[0], b[1], err)
		}
	}
	for _, o := range [][2]string{{"sysclass", "/sys/class"}, {"module", "/sys/module"}} {
		opts := "lowerdir=" + filepath.Join(root, o[0]) + ":" + o[1]
		if err := unix.Mount("overlay", o[1], "overlay", unix.MS_RDONLY, opts); err != nil {
			return fmt.Errorf("overlay the fixture's %s on %s: %w", o[0], o[1], err)
		}
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers
// and the unified v2 one).
func cgroupHierarchies() []string {
	var out []string
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, d := range dirs {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && (st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC) {
			out = append(out, d)
		}
	}
	return out
}

// makeCgroupRoot creates cgroupRoot in every hierarchy; a cpuset cgroup
// needs its CPUs and memory nodes before tasks can join it.
func makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, cgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes cgroupRoot and every cgroup under it, deepest
// first; it fails if a cgroup still has tasks.
func removeCgroupRoot() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, cgroupRoot), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// podNetnsPaths lists the pod network namespaces the runtime has mounted
// under /run/netns (the stand-ins' wire namespaces live there too and are
// left out).
func (n *node) podNetnsPaths() []string {
	wires := map[string]bool{}
	for _, s := range n.standIns {
		wires[s.Wire.Path()] = true
	}
	var out []string
	paths, _ := filepath.Glob("/run/netns/*")
	for _, p := range paths {
		if !wires[p] && !wires[strings.Replace(p, "/run/", "/var/run/", 1)] {
			out = append(out, p)
		}
	}
	return out
}

// vfsHome lists the VFs that are not in this (the node's) network
// namespace under their host name, for the "every VF back" checks.
func (n *node) vfsHome() (missing []string) {
	for _, vf := range n.vfs {
		if testutil.HostLink(vf.NetDev) == nil {
			missing = append(missing, vf.NetDev+" ("+vf.PCI+")")
		}
	}
	return missing
}

// pfOf is the PCI address of a VF's PF in the fixture ("" for no VF).
func (n *node) pfOf(pci string) string {
	for _, pf := range n.dgx.PFs {
		for _, vf := range pf.VFs {
			if vf.PCI == pci {
				return pf.PCI
			}
		}
	}
	return ""
}
