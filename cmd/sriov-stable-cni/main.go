// Command sriov-stable-cni is the chained CNI plugin. Run by a runtime
// (CNI_COMMAND set) it speaks CNI; run by a person it is a small CLI.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/cli"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	skel.PluginMainFuncs(plugin.Funcs(), plugin.Versions, buildinfo.About(plugin.Name))
}
