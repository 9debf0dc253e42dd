package hostconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// node reads the sysfs facts hostconfig needs under a root ("/sys" on a
// node, a fixture tree in tests). It only reads.
type node struct {
	root string
}

func (n node) dev(pci string, elem ...string) string {
	return filepath.Join(append([]string{n.root, "bus", "pci", "devices", pci}, elem...)...)
}

func (n node) exists(pci string) bool {
	_, err := os.Stat(n.dev(pci))
	return err == nil
}

// readInt reads a decimal sysfs attribute.
func readInt(path string) (int, error) { return sysfs.ReadInt(path) }

// readOptInt reads a decimal attribute that older kernels may lack.
func readOptInt(path string) (int, bool, error) {
	v, err := sysfs.ReadOptInt(path)
	return v, err == nil && v >= 0, err
}

// matchPFs lists the SR-IOV capable PFs with the given IDs, sorted.
func (n node) matchPFs(m Match) ([]string, error) {
	fns, _, err := n.sys().Functions(func(_, vendor string) bool { return vendor == m.Vendor })
	if err != nil {
		return nil, fmt.Errorf("match %s: %w", m, err)
	}
	var out []string
	for _, f := range fns {
		if !f.IsVF() && (m.Device == "" || f.Device == m.Device) && f.TotalVFs >= 1 {
			out = append(out, f.Addr)
		}
	}
	return out, nil
}

func (n node) sys() sysfs.Reader { return sysfs.Reader{Root: n.root} }

// virtfn returns the address virtfnN of pf points at, "" when absent.
func (n node) virtfn(pf string, i int) string { return n.sys().Virtfn(pf, i) }

// netdevs lists the host netdevs of a PCI function (its net/ entries).
func (n node) netdevs(pci string) []string { return n.sys().Netdevs(pci) }

// driver returns the name of the driver bound to a PCI function, "" if none.
func (n node) driver(pci string) string { return n.sys().Driver(pci) }

// rdma returns the first RDMA device directory of a PCI function ("" if
// none): mlx5 gives every function exactly one.
func (n node) rdma(pci string) string {
	entries, err := os.ReadDir(n.dev(pci, "infiniband"))
	if err != nil || len(entries) == 0 {
		return ""
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return n.dev(pci, "infiniband", names[0])
}

// linkLayer returns the link layer of port 1 of the function's RDMA device:
// LinkInfiniBand or LinkEthernet; a function without one (igb, a NIC in
// plain Ethernet mode) is Ethernet.
func (n node) linkLayer(pci string) (LinkType, error) {
	dir := n.rdma(pci)
	if dir == "" {
		return LinkEthernet, nil
	}
	ll, err := sysfs.ReadAttr(filepath.Join(dir, "ports", "1", "link_layer"))
	if err != nil {
		return "", fmt.Errorf("read link layer of %s: %w", pci, err)
	}
	if strings.EqualFold(ll, "InfiniBand") {
		return LinkInfiniBand, nil
	}
	return LinkEthernet, nil
}

// nodeGUID reads the node_guid of an RDMA device directory.
func nodeGUID(rdmaDir string) (sysfs.GUID, error) {
	s, err := sysfs.ReadAttr(filepath.Join(rdmaDir, "node_guid"))
	if err != nil {
		return 0, err
	}
	return sysfs.ParseGUID(s)
}

// portGUID reads the port GUID of port 1 from the low 8 bytes of GID 0
// ("fe80:0000:0000:0000:b83f:d203:00a1:b2c4").
func portGUID(rdmaDir string) (sysfs.GUID, error) {
	s, err := sysfs.ReadAttr(filepath.Join(rdmaDir, "ports", "1", "gids", "0"))
	if err != nil {
		return 0, err
	}
	groups := strings.Split(s, ":")
	if len(groups) != 8 {
		return 0, fmt.Errorf("GID %q: want 8 groups of 4 hex digits", s)
	}
	return sysfs.ParseGUID(strings.Join(groups[4:], ""))
}

// pfGUID returns a PF's burned-in port GUID: from GID 0 when set, else the
// node GUID (mlx5 PFs report the same value in both).
func (n node) pfGUID(pci string) (sysfs.GUID, error) {
	dir := n.rdma(pci)
	if dir == "" {
		return 0, fmt.Errorf("PF %s has no RDMA device under %s", pci, n.dev(pci, "infiniband"))
	}
	if g, err := portGUID(dir); err == nil && g != sysfs.GUIDZero {
		return g, nil
	}
	g, err := nodeGUID(dir)
	if err != nil {
		return 0, fmt.Errorf("read GUID of PF %s: %w", pci, err)
	}
	return g, nil
}
