// Command rdma-isolate is a test-only chained CNI plugin that does what
// rdma-cni (and ib-sriov-cni with rdmaIsolation) does in RDMA netns
// exclusive mode: ADD moves the RDMA devices of the VF named by deviceID
// from the host into the pod netns, DEL moves them back. It passes
// prevResult through untouched. The lab chains it between host-device and
// sriov-stable-cni.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

func init() { runtime.LockOSThread() }

type conf struct {
	types.PluginConf
	DeviceID string `json:"deviceID"`
}

func parse(stdin []byte) (*conf, error) {
	c := &conf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, err
	}
	if c.DeviceID == "" {
		return nil, errors.New("rdma-isolate: no deviceID")
	}
	return c, nil
}

// exclusive refuses shared mode, as rdma-cni does: there a device cannot
// change netns.
func exclusive() error {
	mode, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return fmt.Errorf("rdma-isolate: RDMA netns mode: %w", err)
	}
	if mode != "exclusive" {
		return fmt.Errorf("rdma-isolate: the RDMA subsystem is in %s netns mode, exclusive is needed", mode)
	}
	return nil
}

// Equivalent to: rdma dev set $dev netns $pod, for each of the VF's devices.
func add(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return err
	}
	if err := exclusive(); err != nil {
		return err
	}
	devs, err := sysfs.Reader{Root: "/sys"}.RDMADevices(c.DeviceID)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("rdma-isolate: VF %s has no RDMA device in the host's view", c.DeviceID)
	}
	pod, err := ns.GetNS(args.Netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	for _, d := range devs {
		l, err := netlink.RdmaLinkByName(d.Name)
		if err == nil {
			err = netlink.RdmaLinkSetNsFd(l, uint32(pod.Fd()))
		}
		if err != nil {
			return fmt.Errorf("rdma-isolate: move %s into %s: %w", d.Name, args.Netns, err)
		}
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

// Equivalent to: ip netns exec $pod rdma dev set $dev netns 1, for each of
// the VF's devices found in the pod (none when the netns is gone: the
// kernel has moved them back).
func del(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	pod, err := ns.GetNS(args.Netns)
	if err != nil {
		return nil // gone: its devices went home with it
	}
	defer pod.Close()
	l, err := rdma.Finder{Sys: sysfs.Reader{Root: "/sys"}}.Find(rdma.VF{PCI: c.DeviceID, Netns: pod, NetnsPath: args.Netns, WantInfiniBand: true})
	if err != nil {
		return err
	}
	defer l.Close()
	host, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return err
	}
	defer host.Close()
	// The kernel moves a device only for a caller in the device's netns.
	return pod.Do(func(ns.NetNS) error {
		for _, d := range l.Devices {
			if d.Source != rdma.NetnsSysfs {
				continue // already in the host's view
			}
			link, err := netlink.RdmaLinkByName(d.Name)
			if err == nil {
				err = netlink.RdmaLinkSetNsFd(link, uint32(host.Fd()))
			}
			if err != nil {
				return fmt.Errorf("rdma-isolate: move %s home from %s: %w", d.Name, args.Netns, err)
			}
		}
		return nil
	})
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   add,
		Check: func(*skel.CmdArgs) error { return nil },
		Del:   del,
	}, version.All, "rdma-isolate (test only)")
}
