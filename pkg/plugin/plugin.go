// Package plugin implements the sriov-stable-cni verbs: ADD finds the VF by
// PCI address in the pod netns, repairs its name and altname, verifies it
// and records it; CHECK reports drift; DEL hands the VF back; GC and STATUS
// keep the state directory honest.
package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// Name is the plugin's type as written in a network configuration.
const Name = "sriov-stable-cni"

// Versions are the CNI spec versions the plugin speaks. skel refuses CHECK
// below 0.4.0 and GC/STATUS below 1.1.0 itself.
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Plugin holds what one invocation needs.
type Plugin struct {
	conf  *config.NetConf
	log   *slog.Logger
	sys   sysfs.Reader
	store *state.Store
	// threadLocked: the verb runs on a goroutine locked to its thread
	// (MainFuncs), so ADD's RDMA search may enter the pod netns on it.
	threadLocked bool
}

// New builds a plugin for one parsed configuration. logOut receives logs
// when the configuration names no log file.
func New(conf *config.NetConf, logOut io.Writer) (*Plugin, func()) {
	out, closeLog := logOut, func() {}
	if conf.LogFile != "" {
		lf := &lazyLog{path: conf.LogFile, fallback: logOut}
		out, closeLog = lf, lf.close
	}
	log := newLogger(out, conf.Level, slog.String("plugin", Name), slog.String("network", conf.Name))
	return &Plugin{
		conf:  conf,
		log:   log,
		sys:   sysfs.Reader{Root: conf.SysfsRoot},
		store: state.NewStore(conf.StateDir),
	}, closeLog
}

// Funcs wires the verbs for skel. Each verb parses its own configuration:
// strictly for ADD, CHECK, GC and STATUS, leniently for DEL.
func Funcs() skel.CNIFuncs { return funcs(false) }

// MainFuncs is Funcs for a caller whose goroutine is locked to its OS
// thread for good (the command's main, locked in init): ADD then enters
// the pod netns on that thread where it must (rdma.Finder.ThreadLocked).
func MainFuncs() skel.CNIFuncs { return funcs(true) }

func funcs(threadLocked bool) skel.CNIFuncs {
	with := func(parse func([]byte, config.Roots) (*config.NetConf, error), verb func(*Plugin, *skel.CmdArgs) error) func(*skel.CmdArgs) error {
		return func(a *skel.CmdArgs) error { return run(a, threadLocked, parse, verb) }
	}
	return skel.CNIFuncs{
		Add:    with(config.Parse, (*Plugin).Add),
		Check:  with(config.Parse, (*Plugin).Check),
		Del:    with(config.ParseLenient, (*Plugin).Del),
		GC:     with(config.Parse, (*Plugin).GC),
		Status: with(config.Parse, (*Plugin).Status),
	}
}

func run(args *skel.CmdArgs, threadLocked bool, parse func([]byte, config.Roots) (*config.NetConf, error), verb func(*Plugin, *skel.CmdArgs) error) error {
	// The one place the plugin reads its own environment for the
	// configuration: the node administrator's allowed roots.
	conf, err := parse(args.StdinData, config.RootsFrom(os.Getenv(config.AllowedRootsEnv)))
	if err != nil {
		return withCode(types.NewError(types.ErrInvalidNetworkConfig, err.Error(), ""))
	}
	p, closeLog := New(conf, os.Stderr)
	defer closeLog()
	p.threadLocked = threadLocked
	p.adoptLegacyRecords()
	err = verb(p, args)
	if err != nil {
		// The runtime shows the error to one pod; the log keeps it for the node.
		p.log.Error("failed", "command", os.Getenv("CNI_COMMAND"), "container", args.ContainerID,
			"ifname", args.IfName, "netns", args.Netns, "err", err)
		return withCode(err)
	}
	return nil
}

// withCode puts the error's CNI code at the head of its message. Multus
// hands a delegate's error on as text under a code of its own, so kubelet's
// FailedCreatePodSandBox event would otherwise show our message without the
// code an operator looks up.
func withCode(err error) *types.Error {
	e, ok := err.(*types.Error) // as skel tells them apart: a wrapped error is internal
	if !ok {
		e = types.NewError(types.ErrInternal, err.Error(), "")
	}
	prefix := fmt.Sprintf("error %d: ", e.Code)
	if !strings.HasPrefix(e.Msg, prefix) {
		e.Msg = prefix + e.Msg
	}
	return e
}

// adoptLegacyRecords moves this network's records from the stateDir an
// earlier release used by default, when the configuration uses today's
// default: an attachment made before an upgrade keeps its record for DEL,
// CHECK and the ownership check. Without such records it costs one failed
// open.
func (p *Plugin) adoptLegacyRecords() {
	// With PathError (a lenient DEL) the default only stands in for paths
	// no ADD accepted: no state is read or written through it.
	if p.conf.StateDir != config.DefaultStateDir || p.conf.PathError != nil {
		return
	}
	n, err := p.store.Adopt(config.LegacyStateDir, p.conf.Name)
	if n > 0 {
		p.log.Info("adopted records from the old default state directory", "from", config.LegacyStateDir,
			"to", p.conf.StateDir, "records", n)
	}
	if err != nil {
		p.log.Warn("some records in the old default state directory could not be adopted", "from", config.LegacyStateDir, "err", err)
	}
}

// Plugin error codes (100 and up are the plugin's own).
const (
	ErrVFNotFound uint = 100 // the VF is not in the pod netns (or not in sysfs)
	ErrConflict   uint = 101 // CNI_IFNAME or the altname is held by another link, or another live attachment owns the VF
	ErrBadGUID    uint = 102 // GUID zero, all-F or shared with another function
	ErrPortDown   uint = 103 // port not ACTIVE/LinkUp or no carrier within portWaitMs
	ErrMismatch   uint = 104 // link layer or MTU differs from the configuration
	ErrDrift      uint = 105 // CHECK found the attachment changed
)

func cniErr(code uint, format string, a ...any) *types.Error {
	return types.NewError(code, fmt.Sprintf(format, a...), "")
}
