package doctor

import (
	"fmt"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// checkRDMANetns (rdma-netns) looks up the RDMA device of every attachment
// whose netns is alive and reports those found outside the host's sysfs, in
// their pod's netns (RDMA netns exclusive mode: rdma-cni, ib-sriov-cni's
// rdmaIsolation), with what the device reports there. The checks of free
// VFs see only the host's view; these are found where the plugin and the
// monitor find them (package rdma).
func (r *run) checkRDMANetns(recs []*state.Record) int {
	n := 0
	for _, rec := range recs {
		if !vfnet.NetnsAlive(rec.Netns) {
			continue
		}
		obs, err := drift.Observe(drift.FromRecord(rec), r.sys)
		if err != nil || !obs.Found || len(obs.RDMA) == 0 || obs.RDMA[0].Source == rdma.HostSysfs {
			continue
		}
		n++
		d := obs.RDMA[0]
		var ports []string
		for _, p := range d.Ports {
			ports = append(ports, fmt.Sprintf("port %d %s / %s, %s", p.Num, p.State, p.PhysState, p.LinkLayer))
		}
		r.add(SeverityInfo, finding.CheckRDMANetns, rec.PCI, "",
			"VF %s (%s) has its RDMA device %s in netns %s (found through %s): node GUID %s; %s",
			rec.PCI, podOf(rec), d.Name, d.Netns, d.Source, d.NodeGUID, strings.Join(ports, "; "))
	}
	return n
}

// podOf names an attachment's pod for people.
func podOf(rec *state.Record) string {
	if rec.PodName != "" {
		return "pod " + rec.PodNamespace + "/" + rec.PodName
	}
	return "container " + rec.ContainerID
}
