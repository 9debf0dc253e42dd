package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

const remedyGUID = "assign fabric-unique GUIDs: ip link set <PF netdev> vf <N> node_guid <G> port_guid <G>, then unbind and bind the VF " +
	"so mlx5 picks them up; sriov-stable-agent hostconfig generates a boot unit that does this for every VF"

// guidOwner is one RDMA device holding a GUID.
type guidOwner struct {
	addr, rdma string
	port       int // 0 for a node GUID
}

func (o guidOwner) String() string {
	if o.port == 0 {
		return fmt.Sprintf("%s (%s)", o.addr, o.rdma)
	}
	return fmt.Sprintf("%s (%s port %d)", o.addr, o.rdma, o.port)
}

// checkGUIDs reports node and port GUIDs that are zero or all-F, and GUIDs
// shared by two functions of the node. Node and port GUIDs are compared
// within their kind only: a function's port GUID commonly equals its node
// GUID. Port GUIDs come from gids/0 of InfiniBand ports (on Ethernet that GID
// is derived from the MAC and says nothing about GUIDs).
func (r *run) checkGUIDs() {
	nodes := map[sysfs.GUID][]guidOwner{}
	ports := map[sysfs.GUID][]guidOwner{}
	for _, f := range r.allFunctions() {
		for _, d := range f.rdma {
			owner := guidOwner{addr: f.addr, rdma: d.Name}
			if r.guidValid(f, "node GUID", d.NodeGUID, owner) {
				nodes[d.NodeGUID] = append(nodes[d.NodeGUID], owner)
			}
			for _, p := range d.Ports {
				if !strings.EqualFold(p.LinkLayer, "InfiniBand") {
					continue
				}
				g, ok := r.portGUID(f.addr, d.Name, p.Num)
				if !ok {
					continue
				}
				owner := guidOwner{addr: f.addr, rdma: d.Name, port: p.Num}
				if r.guidValid(f, "port GUID", g, owner) {
					ports[g] = append(ports[g], owner)
				}
			}
		}
	}
	r.reportDuplicates("node GUID", nodes)
	r.reportDuplicates("port GUID", ports)
}

func (r *run) allFunctions() []*function {
	return append(append([]*function(nil), r.inv.pfs...), r.inv.vfs...)
}

func (r *run) guidValid(f *function, kind string, g sysfs.GUID, o guidOwner) bool {
	if g.Valid() {
		return true
	}
	why := "zero: never assigned"
	if g == sysfs.GUIDAllOnes {
		why = "all-F: unassigned or reset by the firmware"
	}
	r.add(SeverityError, finding.CheckGUIDInvalid, f.addr, remedyGUID, "%s %s of %s is %s; the subnet manager cannot address it", kind, g, o, why)
	return false
}

func (r *run) reportDuplicates(kind string, byGUID map[sysfs.GUID][]guidOwner) {
	for g, owners := range byGUID {
		if len(owners) < 2 {
			continue
		}
		for i, o := range owners {
			others := make([]string, 0, len(owners)-1)
			for j, p := range owners {
				if j != i {
					others = append(others, p.String())
				}
			}
			sort.Strings(others)
			r.add(SeverityError, finding.CheckGUIDDuplicate, o.addr, remedyGUID, "%s %s of %s is also held by %s; on one fabric only one of them works",
				kind, g, o, strings.Join(others, ", "))
		}
	}
}

// portGUID reads a port's GUID: the low 64 bits of gids/0 (the high 64
// are the subnet prefix, fe80:: by default). An unreadable or all-zero GID
// is not a finding: there is simply no port GUID to judge.
func (r *run) portGUID(addr, rdma string, port int) (sysfs.GUID, bool) {
	raw, err := sysfs.ReadAttr(r.sys.PCIPath(addr, "infiniband", rdma, "ports", fmt.Sprint(port), "gids", "0"))
	if err != nil {
		return 0, false
	}
	groups := strings.Split(raw, ":")
	if len(groups) != 8 || strings.Trim(strings.Join(groups, ""), "0") == "" {
		return 0, false // not a GID, or an empty table entry (no prefix either)
	}
	g, err := sysfs.ParseGUID(strings.Join(groups[4:], ""))
	if err != nil {
		return 0, false
	}
	return g, true
}
