// Package publish is the node side of the fabric ledger: it reads the
// identities of the node's VFs (the host's sysfs for a VF whose RDMA
// device the host sees, the attachment record for one whose device lives
// in its pod's netns) and writes them into the node's NodeVFSet, by
// server-side apply and only when they changed.
package publish

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/fabric/v1alpha1"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// MaxVFs bounds the VFs one node publishes (the CRD's bound): a node has
// at most a few hundred.
const MaxVFs = 1024

// Identities reads the node's VFs that have an RDMA device, or had one
// when a pod's record was written, sorted by PCI address. prev are the
// VFs published last: a VF keeps its Since while its node GUID is the
// same; one new, or with a new GUID, gets now. A VF with neither (a plain
// netdev VF, an unbound one) has nothing the fabric knows it by and is
// left out. A function that cannot be read is left out and named in the
// error, and the rest are returned.
// Equivalent to: cat $root/bus/pci/devices/*/infiniband/*/{node_guid,sys_image_guid,ports/1/*}
func Identities(sys sysfs.Reader, recs []*state.Record, prev []v1alpha1.VF, now time.Time) ([]v1alpha1.VF, error) {
	fns, fnErrs, err := sys.Functions(nil)
	if err != nil {
		return nil, fmt.Errorf("read the node's PCI functions: %w", err)
	}
	var errs []string
	for _, e := range fnErrs {
		errs = append(errs, e.Error())
	}
	held := make(map[string]*state.Record, len(recs))
	for _, r := range recs {
		held[r.PCI] = r
	}
	since := make(map[string]v1alpha1.VF, len(prev))
	for _, v := range prev {
		since[v.PCI] = v
	}
	sysGUIDs := map[string]sysfs.GUID{} // PF → its card's system image GUID
	var out []v1alpha1.VF
	for _, f := range fns {
		if !f.IsVF() {
			continue
		}
		devs, err := sys.RDMADevices(f.Addr)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		rec := held[f.Addr]
		v := v1alpha1.VF{PCI: f.Addr, PF: f.PF}
		switch {
		case len(devs) > 0:
			fromSysfs(&v, devs[0])
		case rec != nil && (rec.NodeGUID != "" || len(rec.RDMA) > 0):
			fromRecord(&v, rec)
		default:
			continue
		}
		if v.SysImageGUID == "" {
			g, ok := sysGUIDs[f.PF]
			if !ok {
				g = pfSysImageGUID(sys, f.PF)
				sysGUIDs[f.PF] = g
			}
			if g != 0 {
				v.SysImageGUID = g.String()
			}
		}
		if rec != nil && rec.PodName != "" {
			v.Pod = &v1alpha1.PodRef{Namespace: rec.PodNamespace, Name: rec.PodName, UID: rec.PodUID}
		}
		v.Since = metav1.NewTime(now)
		if p, ok := since[f.Addr]; ok && p.NodeGUID == v.NodeGUID {
			v.Since = p.Since
		}
		if len(out) == MaxVFs {
			errs = append(errs, fmt.Sprintf("more than %d VFs with RDMA devices: the rest are not published", MaxVFs))
			break
		}
		out = append(out, v)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("read VF identities: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// fromSysfs fills v from its RDMA device as the host sees it: port 1's
// link layer and state, and the port GUID of each InfiniBand port (a RoCE
// port's GID 0 comes from its MAC and names nothing on an IB fabric).
func fromSysfs(v *v1alpha1.VF, d sysfs.RDMADevice) {
	v.RDMADevice, v.NodeGUID = d.Name, d.NodeGUID.String()
	if d.SysImageGUID != 0 {
		v.SysImageGUID = d.SysImageGUID.String()
	}
	for i, p := range d.Ports {
		if i == 0 {
			v.LinkLayer, v.PortState = p.LinkLayer, p.State.Name
		}
		if p.LinkLayer == "InfiniBand" {
			v.PortGUIDs = append(v.PortGUIDs, p.GUID.String())
		}
	}
}

// fromRecord fills v from the record of the pod holding it, for a VF whose
// RDMA device moved into the pod's netns (RDMA exclusive mode): what ADD
// read then. Its port state is the pod's to see.
func fromRecord(v *v1alpha1.VF, r *state.Record) {
	v.NodeGUID = r.NodeGUID
	if len(r.RDMA) > 0 {
		v.RDMADevice = r.RDMA[0]
	}
	switch r.LinkLayer {
	case "infiniband":
		v.LinkLayer = "InfiniBand"
	case "ethernet":
		v.LinkLayer = "Ethernet"
	}
}

// pfSysImageGUID is the system image GUID of PF pf's RDMA device, which
// its VFs share; 0 when it has none the host sees.
func pfSysImageGUID(sys sysfs.Reader, pf string) sysfs.GUID {
	if pf == "" {
		return 0
	}
	devs, err := sys.RDMADevices(pf)
	if err != nil || len(devs) == 0 {
		return 0
	}
	return devs[0].SysImageGUID
}
