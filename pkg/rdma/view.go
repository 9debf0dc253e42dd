package rdma

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// View is what RDMA netlink shows in the calling thread's netns, for an
// operator (the agent's support bundle): the kernel's RDMA netns mode and
// every device with its ports.
// Equivalent to: rdma system show; rdma dev show -d; rdma link show
type View struct {
	NetnsMode string       `json:"netnsMode"` // "shared" or "exclusive"
	Devices   []ViewDevice `json:"devices"`
}

// ViewDevice is one RDMA device as RDMA netlink shows it.
type ViewDevice struct {
	Name         string     `json:"name"`
	NodeGUID     string     `json:"nodeGUID"`
	SysImageGUID string     `json:"sysImageGUID"`
	Protocol     string     `json:"protocol,omitempty"` // ib, roce, iw; "" from kernels that do not say
	Ports        []ViewPort `json:"ports"`
}

// ViewPort is one port: its states and the netdev it is bound to in this
// netns (none when the netdev is in another netns, or there is none).
type ViewPort struct {
	Num         int    `json:"num"`
	State       string `json:"state"`
	PhysState   string `json:"physState"`
	Netdev      string `json:"netdev,omitempty"`
	NetdevIndex int    `json:"netdevIndex,omitempty"`
}

// NetlinkView reads the View of the calling thread's netns.
func NetlinkView() (*View, error) {
	mode, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return nil, fmt.Errorf("RDMA netns mode: %w", err)
	}
	devs, err := listDevices()
	if err != nil {
		return nil, err
	}
	if err := bindProtocol(devs); err != nil {
		return nil, err
	}
	v := &View{NetnsMode: mode, Devices: []ViewDevice{}}
	for _, d := range devs {
		vd := ViewDevice{Name: d.name, NodeGUID: d.nodeGUID.String(), SysImageGUID: d.sysGUID.String(), Protocol: d.protocol, Ports: []ViewPort{}}
		for _, p := range d.ports {
			vd.Ports = append(vd.Ports, ViewPort{Num: p.Num, State: p.State.String(), PhysState: p.PhysState.String(), Netdev: p.ndevName, NetdevIndex: p.ndevIndex})
		}
		v.Devices = append(v.Devices, vd)
	}
	return v, nil
}
