// Command rename-as-udev is a test-only chained CNI plugin that renames the
// link CNI_IFNAME in the pod netns to "newName", as a udev rule racing the
// CNI would, and passes prevResult through untouched. A newName of "{host}"
// is the VF's name on the host (the systemd predictable name, say
// ibp24s0f0v3), which sysfs lists under the "deviceID" device's net/ (in
// the tests, a fixture sysfs that keeps listing it after the move).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

func init() { runtime.LockOSThread() }

// hostName is the newName that stands for the VF's host name.
const hostName = "{host}"

type conf struct {
	types.PluginConf
	NewName  string `json:"newName"`
	DeviceID string `json:"deviceID"` // the VF's PCI address, as Multus writes it
	// OccupyIfName creates another link named CNI_IFNAME after the rename,
	// so the next plugin finds its name taken.
	OccupyIfName bool `json:"occupyIfName"`
}

func add(args *skel.CmdArgs) error {
	c := &conf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return err
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return err
	}
	if c.NewName == hostName {
		names, err := os.ReadDir(filepath.Join("/sys/bus/pci/devices", c.DeviceID, "net"))
		if err != nil || len(names) != 1 {
			return fmt.Errorf("rename-as-udev: the host name of VF %q: %d names in its sysfs net/ (%v)", c.DeviceID, len(names), err)
		}
		c.NewName = names[0].Name()
	}
	err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		l, err := netlinksafe.LinkByName(args.IfName)
		if err != nil {
			return err
		}
		_ = netlink.LinkSetDown(l)
		if err := netlink.LinkSetName(l, c.NewName); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if c.OccupyIfName {
			return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: args.IfName}, PeerName: "occupant0"})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rename-as-udev: %w", err)
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   add,
		Check: func(*skel.CmdArgs) error { return nil },
		Del:   func(*skel.CmdArgs) error { return nil },
	}, version.All, "rename-as-udev (test only)")
}
