// Command rename-as-udev is a test-only chained CNI plugin that renames the
// link CNI_IFNAME in the pod netns to "newName", as a udev rule racing the
// CNI would, and passes prevResult through untouched.
package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

func init() { runtime.LockOSThread() }

type conf struct {
	types.PluginConf
	NewName string `json:"newName"`
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
	err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		l, err := netlink.LinkByName(args.IfName)
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
