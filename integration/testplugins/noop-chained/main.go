// Command noop-chained is the bench's floor: a chained CNI plugin built the
// way ours is (Go, skel) that only parses its configuration and passes
// prevResult through. What it costs is the price of being a chained Go
// plugin at all; the bench measures ours against it.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// parse reads the configuration and its prevResult, as every chained
// plugin must before it can do anything.
func parse(args *skel.CmdArgs) (*types.PluginConf, error) {
	c := &types.PluginConf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	if err := version.ParsePrevResult(c); err != nil {
		return nil, fmt.Errorf("parse prevResult: %w", err)
	}
	return c, nil
}

func add(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	if c.PrevResult == nil {
		return fmt.Errorf("noop-chained must be chained: no prevResult")
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

func checkOrDel(args *skel.CmdArgs) error {
	_, err := parse(args)
	return err
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Check: checkOrDel, Del: checkOrDel},
		version.All, "noop-chained (bench floor, test only)")
}
