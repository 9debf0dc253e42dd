// Command sriov-stable-cni is the chained CNI plugin. Run by a runtime
// (CNI_COMMAND set) it speaks CNI; run by a person it is a small CLI
// (cli.go): version, help and install.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

// init keeps main on the main thread, as the containernetworking plugins do.
func init() { runtime.LockOSThread() }

func main() {
	if os.Getenv("CNI_COMMAND") != "" {
		skel.PluginMainFuncs(plugin.MainFuncs(), plugin.Versions, buildinfo.About(plugin.Name))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
