package bundle

import (
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// function is one PCI function as the bundle shows it: what sysfs says of
// it, its host netdevs and its RDMA devices.
type function struct {
	Addr     string         `json:"addr"`
	Vendor   string         `json:"vendor"`
	Device   string         `json:"device"`
	Driver   string         `json:"driver"`
	PF       string         `json:"pf,omitempty"`
	Index    int            `json:"vfIndex"`
	TotalVFs int            `json:"sriovTotalVFs"`
	NumVFs   int            `json:"sriovNumVFs"`
	VFs      map[int]string `json:"virtfn,omitempty"`
	Netdevs  []netdev       `json:"netdevs"`
	RDMA     []rdmaDevice   `json:"rdma"`
	Error    string         `json:"error,omitempty"`
}

type netdev struct {
	Name      string `json:"name"`
	Operstate string `json:"operstate"`
	Up        bool   `json:"up"`
	Carrier   bool   `json:"carrier"` // false while the netdev is down (the kernel knows none)
	Address   string `json:"address"`
	MTU       string `json:"mtu"`
	Error     string `json:"error,omitempty"`
}

type rdmaDevice struct {
	Name         string `json:"name"`
	NodeGUID     string `json:"nodeGUID"`
	SysImageGUID string `json:"sysImageGUID"`
	FWVer        string `json:"fwVer,omitempty"`
	Ports        []port `json:"ports"`
	Error        string `json:"error,omitempty"`
}

type port struct {
	Num       int    `json:"num"`
	State     string `json:"state"`
	PhysState string `json:"physState"`
	LinkLayer string `json:"linkLayer"`
	GUID      string `json:"guid"` // the interface ID of GID 0
}

// mellanox is the PCI vendor of ConnectX cards.
const mellanox = "0x15b3"

// sysfs writes sysfs/functions.json: every Mellanox function and every
// function of SR-IOV (a PF that can have VFs, a VF), each with its host
// netdevs (state, carrier, MAC, MTU) and RDMA devices (GUIDs, firmware,
// ports' state and link layer).
// Equivalent to: for f in /sys/bus/pci/devices/*; do cat $f/{vendor,device,sriov_*}; ls -l $f/{driver,physfn,virtfn*}; cat $f/net/*/{flags,operstate,carrier,address,mtu} $f/infiniband/*/{node_guid,sys_image_guid,fw_ver,ports/*/{state,phys_state,link_layer,gids/0}}; done
func (b *writer) sysfs(root string) error {
	if root == "" {
		return nil
	}
	r := sysfs.Reader{Root: root}
	if err := r.Readable(); err != nil {
		b.problem("%v", err)
		return nil
	}
	fns, errs, err := r.Functions(nil)
	if err != nil {
		b.problem("sysfs %s: %v", root, err)
		return nil
	}
	failed := map[string]string{}
	for _, e := range errs {
		failed[e.Addr] = e.Err.Error()
	}
	out := []function{}
	for _, f := range fns {
		if f.Vendor != mellanox && !f.IsVF() && f.TotalVFs <= 0 {
			continue
		}
		fn := function{Addr: f.Addr, Vendor: f.Vendor, Device: f.Device, Driver: f.Driver, PF: f.PF, Index: f.Index,
			TotalVFs: f.TotalVFs, NumVFs: f.NumVFs, VFs: f.VFs, Netdevs: []netdev{}, RDMA: []rdmaDevice{}, Error: failed[f.Addr]}
		for _, name := range f.Netdevs {
			nd := netdev{Name: name}
			st, err := r.NetdevState(f.Addr, name)
			if err != nil {
				nd.Error = err.Error()
			}
			nd.Operstate, nd.Up, nd.Carrier = st.OperState, st.Up, st.Carrier
			nd.Address, _ = sysfs.ReadAttr(r.PCIPath(f.Addr, "net", name, "address"))
			nd.MTU, _ = sysfs.ReadAttr(r.PCIPath(f.Addr, "net", name, "mtu"))
			fn.Netdevs = append(fn.Netdevs, nd)
		}
		devs, err := r.RDMADevices(f.Addr)
		if err != nil {
			fn.RDMA = append(fn.RDMA, rdmaDevice{Error: err.Error()})
		}
		for _, d := range devs {
			rd := rdmaDevice{Name: d.Name, NodeGUID: d.NodeGUID.String(), SysImageGUID: d.SysImageGUID.String(), Ports: []port{}}
			if fw, err := r.FWVer(f.Addr, d.Name); err == nil {
				rd.FWVer = fw
			}
			for _, p := range d.Ports {
				rd.Ports = append(rd.Ports, port{Num: p.Num, State: p.State.String(), PhysState: p.PhysState.String(), LinkLayer: p.LinkLayer, GUID: p.GUID.String()})
			}
			fn.RDMA = append(fn.RDMA, rd)
		}
		out = append(out, fn)
	}
	return b.addJSON("sysfs/functions.json", root+"/bus/pci/devices", out)
}
