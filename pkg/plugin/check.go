package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// Check locates the VF by PCI address again and reports every drift at
// once as error 105, one line per reason. The expectation is the chain's
// final result where it speaks (later plugins may change MAC or MTU
// legitimately), then the configuration, then the ADD record.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	if err := checkArgs(args); err != nil {
		return err
	}
	if !p.conf.HasPrevResult() {
		return cniErr(types.ErrInvalidNetworkConfig, "CHECK of network %s needs the prevResult of ADD; none was given", p.conf.Name)
	}
	prev, err := parsePrevResult(p.conf)
	if err != nil {
		return err
	}
	rec, err := p.store.Load(state.Key{Network: p.conf.Name, ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return cniErr(types.ErrIOFailure, "%v", err)
	}
	exp, err := p.expectation(args, prev, rec)
	if err != nil {
		return err
	}
	obs, err := drift.Observe(exp, p.sys)
	if errors.Is(err, drift.ErrNetnsGone) {
		return cniErr(types.ErrInvalidEnvironmentVariables, "VF %s: pod netns %s does not exist or is not a network namespace", exp.PCI, args.Netns)
	}
	if err != nil {
		return cniErr(types.ErrInternal, "VF %s in netns %s: %v", exp.PCI, args.Netns, err)
	}
	findings := drift.Compare(exp, obs)
	if rec == nil {
		findings = append(findings, drift.Finding{Reason: "record-missing",
			Detail: fmt.Sprintf("no ADD record for %s/%s/%s in %s", p.conf.Name, args.ContainerID, args.IfName, p.conf.StateDir)})
	}
	// portPolicy warn: a port that cannot pass traffic is logged, as ADD
	// logs it, and fails nothing.
	findings = slices.DeleteFunc(findings, func(f drift.Finding) bool {
		if f.Warn {
			p.log.Warn("CHECK: the VF's port cannot pass traffic (portPolicy warn)", "vf", exp.PCI, "netns", args.Netns,
				"ifName", args.IfName, "reason", string(f.Reason), "detail", f.Detail)
		}
		return f.Warn
	})
	if len(findings) == 0 {
		return nil
	}
	lines := make([]string, len(findings))
	for i, f := range findings {
		lines[i] = f.String()
	}
	return cniErr(ErrDrift, "VF %s (%s) in netns %s drifted:\n%s", exp.PCI, args.IfName, args.Netns, strings.Join(lines, "\n"))
}

// expectation merges the chain's final result, the configuration and the
// ADD record into what CHECK compares against.
func (p *Plugin) expectation(args *skel.CmdArgs, prev *current.Result, rec *state.Record) (drift.Expect, error) {
	exp := drift.Expect{Netns: args.Netns, IfName: args.IfName}
	if rec != nil {
		exp = drift.FromRecord(rec)
		exp.Netns, exp.IfName = args.Netns, args.IfName
	}
	exp.PortPolicy = p.conf.PortPolicy
	if exp.PCI == "" {
		pci, _, err := resolvePCI(p.conf, prev, args.Netns, args.IfName)
		if err != nil {
			return exp, cniErr(types.ErrInvalidNetworkConfig, "%v", err)
		}
		exp.PCI = pci
	}
	if exp.AltName == "" {
		vf, err := p.sys.ReadFunction(exp.PCI)
		if err != nil {
			return exp, cniErr(ErrVFNotFound, "VF %s: %v", exp.PCI, err)
		}
		exp.PF = vf.PF
		if exp.AltName, err = config.RenderAltName(p.conf.AltName, exp.PCI, vf.PF, vf.Index); err != nil {
			return exp, cniErr(types.ErrInvalidNetworkConfig, "%v", err)
		}
	}
	if i := ourInterface(prev, args.Netns, args.IfName, exp.PCI, ""); i >= 0 {
		iface := prev.Interfaces[i]
		if iface.Mac != "" {
			exp.MAC = iface.Mac
		}
		if iface.Mtu != 0 {
			exp.MTU = iface.Mtu
		}
	}
	if p.conf.MTU != 0 {
		exp.MTU = p.conf.MTU
	}
	if p.conf.LinkLayer != config.LinkLayerAuto {
		exp.LinkLayer = p.conf.LinkLayer
	}
	if p.conf.GUIDPolicy == config.PolicyIgnore {
		exp.NodeGUID, exp.RDMA = "", false
	}
	return exp, nil
}
