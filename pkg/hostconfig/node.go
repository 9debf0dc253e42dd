package hostconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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
func readInt(path string) (int, error) {
	s, err := sysfs.ReadAttr(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, s)
	}
	return v, nil
}

// readOptInt reads a decimal attribute that older kernels may lack.
func readOptInt(path string) (int, bool, error) {
	v, err := readInt(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// matchPFs lists the SR-IOV capable PFs with the given IDs, sorted.
func (n node) matchPFs(m Match) ([]string, error) {
	dir := filepath.Join(n.root, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list PCI devices to match %s: %w", m, err)
	}
	var out []string
	for _, e := range entries {
		pci := e.Name()
		if v, _ := sysfs.ReadAttr(n.dev(pci, "vendor")); v != m.Vendor {
			continue
		}
		if d, _ := sysfs.ReadAttr(n.dev(pci, "device")); m.Device != "" && d != m.Device {
			continue
		}
		if _, err := os.Lstat(n.dev(pci, "physfn")); err == nil {
			continue // a VF
		}
		if total, err := readInt(n.dev(pci, "sriov_totalvfs")); err != nil || total < 1 {
			continue
		}
		out = append(out, pci)
	}
	sort.Strings(out)
	return out, nil
}

// virtfn returns the address virtfnN of pf points at, "" when absent.
func (n node) virtfn(pf string, i int) string {
	target, err := os.Readlink(n.dev(pf, "virtfn"+strconv.Itoa(i)))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// netdevs lists the host netdevs of a PCI function (its net/ entries).
func (n node) netdevs(pci string) []string {
	entries, err := os.ReadDir(n.dev(pci, "net"))
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// driver returns the name of the driver bound to a PCI function, "" if none.
func (n node) driver(pci string) string {
	target, err := os.Readlink(n.dev(pci, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

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
