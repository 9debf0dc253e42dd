package kubecluster

import (
	"errors"
	"fmt"
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

// Node is the fixture DGX H200 node the cluster runs on.
type Node struct {
	DGX      *sysfstest.DGXNode
	VFs      []sysfstest.DGXVF            // every VF, in PF order
	StandIns map[string]*testutil.StandIn // by VF PCI address
	MACs     map[string]string            // the stand-ins' MACs, by VF PCI address
	// ZeroGUID is the VF whose node and port GUID are zero: the last VF of
	// the last PF, advertised alone as ResourceZeroGUID.
	ZeroGUID  sysfstest.DGXVF
	LogDir    string // the components' logs, on the host: survives the run
	varLogDir string // bind-mounted over /var/log
}

// UnsetGUID is the GUID of a VF whose firmware holds none.
const UnsetGUID = "0000:0000:0000:0000"

// setupNode makes the run's mount namespace look like a DGX H200 node and
// its network namespace hold the VFs' stand-ins. Only this namespace sees
// any of it.
func setupNode(tb *harness.ProgramTB, workDir string) (*Node, error) {
	n := &Node{StandIns: map[string]*testutil.StandIn{}, MACs: map[string]string{}, LogDir: filepath.Join(workDir, "logs"),
		varLogDir: filepath.Join(workDir, "var-log")}
	if err := recordNamespaces(workDir); err != nil {
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
	if err := mountFixture(n.DGX.Root); err != nil {
		return nil, err
	}
	for _, vf := range n.VFs {
		// With the stable altname, as the host's .link files give it
		// (hostconfig): a veth has no parent PCI device to be found by.
		n.StandIns[vf.PCI] = testutil.NewStandIn(tb, vf.NetDev, vf.PCI, true)
		n.MACs[vf.PCI] = testutil.HostLink(vf.NetDev).Attrs().HardwareAddr.String()
	}
	if err := makeCgroupRoot(); err != nil {
		return nil, err
	}
	return n, nil
}

// recordNamespaces writes this stage's namespace links for the host check.
func recordNamespaces(workDir string) error {
	var links []string
	for _, kind := range []string{"net", "mnt", "pid"} {
		l, err := os.Readlink("/proc/self/ns/" + kind)
		if err != nil {
			return err
		}
		links = append(links, l)
	}
	return os.WriteFile(filepath.Join(workDir, namespacesFile), []byte(strings.Join(links, "\n")+"\n"), 0o644)
}

// privateDirs hides the host's state directories behind private ones in
// this mount namespace: tmpfs over /run (containerd's state, pod netns, the
// plugin's records, device info files), /var/lib (kubelet, containerd, CNI
// caches) and /opt (the node's CNI bin dir); a directory of the work dir
// over /var/log (pod logs, kept for the artifacts).
func privateDirs(n *Node) error {
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
	for _, dir := range []string{n.LogDir, n.varLogDir, CNIBinDir, runDir, filepath.Join(runDir, "tmp")} {
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
//
// Equivalent to: ip link set lo up; ip addr add $NodeIP/32 dev lo;
// ip route add $serviceCIDR dev lo src $NodeIP scope link
func nodeAddress() error {
	lo, err := netlinksafe.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(NodeIP), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(lo, addr); err != nil {
		return fmt.Errorf("add the node IP %s to lo: %w", NodeIP, err)
	}
	_, services, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return err
	}
	route := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: services, Src: net.ParseIP(NodeIP), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("route the service range %s to lo: %w", serviceCIDR, err)
	}
	return nil
}

// buildFixture builds the DGX H200 fixture with one broken VF: the last VF
// of the last PF has a zero node and port GUID (scenario 4).
func buildFixture(tb *harness.ProgramTB, n *Node) error {
	n.DGX = sysfstest.NewDGXH200(tb)
	for _, pf := range n.DGX.PFs {
		n.VFs = append(n.VFs, pf.VFs...)
	}
	n.ZeroGUID = n.VFs[len(n.VFs)-1]
	n.SetGUID(n.ZeroGUID, UnsetGUID)
	// The overlay on /sys/class (mountFixture) takes a layer holding just
	// class/infiniband: move it to sysclass/infiniband, at the same depth so
	// its relative links still resolve, and leave a link in its place.
	class := filepath.Join(n.DGX.Root, "class", "infiniband")
	layer := filepath.Join(n.DGX.Root, "sysclass")
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

// PodNetnsPaths lists the pod network namespaces the runtime has mounted
// under /run/netns (the stand-ins' wire namespaces live there too and are
// left out).
func (n *Node) PodNetnsPaths() []string {
	wires := map[string]bool{}
	for _, s := range n.StandIns {
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

// VFsHome lists the VFs that are not in this (the node's) network
// namespace under their host name, for the "every VF back" checks.
func (n *Node) VFsHome() (missing []string) {
	for _, vf := range n.VFs {
		if testutil.HostLink(vf.NetDev) == nil {
			missing = append(missing, vf.NetDev+" ("+vf.PCI+")")
		}
	}
	return missing
}

// PFOf is the PCI address of a VF's PF in the fixture ("" for no VF).
func (n *Node) PFOf(pci string) string {
	for _, pf := range n.DGX.PFs {
		for _, vf := range pf.VFs {
			if vf.PCI == pci {
				return pf.PCI
			}
		}
	}
	return ""
}

// VFByPCI is the fixture's VF at a PCI address.
func (n *Node) VFByPCI(pci string) sysfstest.DGXVF {
	for _, vf := range n.VFs {
		if vf.PCI == pci {
			return vf
		}
	}
	return sysfstest.DGXVF{}
}

// SetGUID writes a VF's node and port GUID into the fixture, as the kernel
// shows them once the firmware holds them.
func (n *Node) SetGUID(vf sysfstest.DGXVF, guid string) {
	n.DGX.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: guid, FWVer: sysfstest.DGXFirmware,
		Ports: []sysfstest.Port{{GID0: sysfstest.GID0(guid)}}})
}

// SetPortDown writes a VF's port as administratively disabled (or, with
// down false, ACTIVE/LinkUp again), keeping its GUID.
func (n *Node) SetPortDown(vf sysfstest.DGXVF, down bool) {
	p := sysfstest.Port{GID0: sysfstest.GID0(vf.PortGUID)}
	if down {
		p.State, p.PhysState = "1: DOWN", "3: Disabled"
	}
	n.DGX.SetPort(vf.PCI, vf.RDMA, 1, p)
}
