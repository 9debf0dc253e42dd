package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	cnins "github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/crashpoint"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// portPollInterval is the sleep between port state reads while ADD waits.
const portPollInterval = 25 * time.Millisecond

// attachment is what ADD learns and decides about one VF, step by step.
type attachment struct {
	args      *skel.CmdArgs
	network   string
	pod       podArgs
	prev      *current.Result
	pci       string
	vf        *sysfs.VF    // the VF's PF and index (RDMA devices are in rdma)
	rdma      *rdma.Lookup // the VF's RDMA devices, wherever they are
	altName   string
	foundAs   string
	added     bool // we added the altname
	lock      *state.VFLock
	guidLocks []*state.GUIDLock                // held from the GUID directory check to the record (attachedDuplicate)
	guids     func() (*sysfs.GUIDIndex, error) // the node's GUIDs for the duplicate check (see chooseGUIDIndex)
	saved     bool                             // guids is the saved index, not a fresh scan
	link      netlink.Link
	obs       *drift.Observation
	undo      []func()
}

func (a *attachment) onUndo(f func()) { a.undo = append(a.undo, f) }

func (a *attachment) key() state.Key {
	return state.Key{Network: a.network, ContainerID: a.args.ContainerID, IfName: a.args.IfName}
}

func (a *attachment) rollback() {
	for _, f := range slices.Backward(a.undo) {
		f()
	}
}

// Add runs ADD: parse, host facts, locate, repair, verify, record, result.
// Every change in the pod netns registers its undo; a failure at any later
// step runs them all, inside the netns, before ADD returns.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	a, err := p.prepare(args)
	if err != nil {
		return err
	}
	defer func() { a.rdma.Close() }()
	lock, err := p.store.LockVF(a.pci)
	if err != nil {
		return cniErr(types.ErrIOFailure, "VF %s: %v", a.pci, err)
	}
	defer lock.Unlock()
	a.lock = lock
	defer func() {
		for _, l := range a.guidLocks {
			l.Unlock()
		}
	}()
	if err := p.claimVF(a); err != nil {
		return err
	}
	if err := p.readHostFacts(a); err != nil {
		return err
	}
	err = vfnet.InNetns(args.Netns, func(h *vfnet.Handle) (err error) {
		defer func() {
			if err != nil {
				a.rollback()
			}
		}()
		for _, step := range []func(*vfnet.Handle, *attachment) error{
			p.locateVF, p.repairName, p.ensureAltName, p.findRDMA, p.verify, p.recordAttachment,
		} {
			if err := step(h, a); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, vfnet.ErrNetnsGone) {
		return cniErr(types.ErrInvalidEnvironmentVariables, "VF %s: pod netns %s does not exist or is not a network namespace", a.pci, args.Netns)
	}
	if err != nil {
		return asCNIError(err, a)
	}
	p.publishDeviceInfo(a)
	res := correctResult(a.prev, current.Interface{
		Name: args.IfName, Mac: a.obs.MAC, Mtu: a.obs.MTU, Sandbox: args.Netns, PciID: a.pci,
	})
	p.log.Info("attached", "vf", a.pci, "netns", args.Netns, "ifname", args.IfName, "namespace", a.pod.K8S_POD_NAMESPACE,
		"pod", a.pod.K8S_POD_NAME, "foundAs", a.foundAs,
		"altname", a.altName, "mac", a.obs.MAC)
	return types.PrintResult(res, p.conf.CNIVersion)
}

// prepare checks what ADD needs before touching anything: runtime
// arguments, a prevResult, and the VF's PCI address.
func (p *Plugin) prepare(args *skel.CmdArgs) (*attachment, error) {
	if err := checkArgs(args); err != nil {
		return nil, err
	}
	if err := refuseHostNetns(args.Netns); err != nil {
		return nil, err
	}
	if !p.conf.HasPrevResult() {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "%s must be chained after sriov-cni, ib-sriov-cni or host-device: "+
			"no prevResult in the configuration (network %s)", Name, p.conf.Name)
	}
	prev, err := parsePrevResult(p.conf)
	if err != nil {
		return nil, err
	}
	pci, source, err := resolvePCI(p.conf, prev, args.Netns, args.IfName)
	if err != nil {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "%v", err)
	}
	p.log.Debug("resolved VF", "vf", pci, "from", source)
	return &attachment{args: args, network: p.conf.Name, prev: prev, pci: pci, pod: p.podArgs(args), rdma: &rdma.Lookup{}}, nil
}

func checkArgs(args *skel.CmdArgs) error {
	if err := config.ValidateIfName(args.IfName); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME is not a valid interface name: %v", err)
	}
	if err := config.ValidateKeyPart("CNI_CONTAINERID", args.ContainerID); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "%v", err)
	}
	return nil
}

// refuseHostNetns fails when CNI_NETNS is the plugin's own network
// namespace, the host's: ADD there would rename, verify and record a host
// interface as a pod's. The CNI library compares the namespaces' device
// and inode (fstat of the opened path against the thread's own netns),
// never paths. A path that is not a netns is left to the pod netns step,
// which says so. skel makes the same check, but only after the verb ran.
func refuseHostNetns(netns string) error {
	own, err := cnins.CheckNetNS(netns)
	if err != nil {
		return cniErr(err.Code, "cannot tell whether CNI_NETNS %s is the host's network namespace: %s", netns, err.Msg)
	}
	if own {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS %s is the host's network namespace (the plugin's own), "+
			"not a pod's: refusing to rename or record host interfaces; the runtime must pass the pod sandbox's netns", netns)
	}
	return nil
}

// parsePrevResult reads prevResult as the library does, in the result
// type of the configuration's cniVersion (or prevResult's own), and
// converts it to the current one.
func parsePrevResult(conf *config.NetConf) (*current.Result, error) {
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "cannot read prevResult (cniVersion %s): %v", conf.CNIVersion, err)
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "cannot convert prevResult to %s: %v", current.ImplementedSpecVersion, err)
	}
	return prev, nil
}

// claimVF makes sure no other live attachment owns the VF; it runs under
// the VF's lock, so of two ADDs racing for one VF exactly one gets it. A
// record for the same PCI address under another key is live while its
// netns still holds the VF: that is a conflict (a device plugin handing
// out one VF twice). Otherwise its DEL was lost and the record is stale:
// it is dropped, so a late DEL of that attachment finds the new owner's
// record and leaves the VF alone.
func (p *Plugin) claimVF(a *attachment) error {
	recs, err := a.lock.Claims(a.pci, a.key())
	if err != nil {
		p.log.Warn("some records are unreadable", "err", err)
	}
	for _, r := range recs {
		err := vfnet.InNetns(r.Netns, func(h *vfnet.Handle) error {
			_, err := h.Locate(r.PCI, r.AltName)
			return err
		})
		var nf *vfnet.NotFoundError
		var conflict *vfnet.AltNameConflictError
		if errors.Is(err, vfnet.ErrNetnsGone) || errors.As(err, &nf) || errors.As(err, &conflict) {
			p.log.Warn("dropping a stale record of this VF: its netns no longer holds it", "vf", a.pci,
				"container", r.ContainerID, "ifname", r.IfName, "network", r.Network, "netns", r.Netns)
			if err := p.store.Delete(r.Key()); err != nil {
				return cniErr(types.ErrIOFailure, "VF %s: %v", a.pci, err)
			}
			continue
		}
		why := "its netns still holds the VF"
		if err != nil {
			why = fmt.Sprintf("cannot tell whether its netns still holds the VF: %v", err)
		}
		return cniErr(ErrConflict, "VF %s is already attached to container %s (network %s, ifname %s, netns %s; %s); "+
			"refusing to attach it to container %s too: is the device plugin handing out one VF twice? DEL the old attachment first",
			a.pci, r.ContainerID, r.Network, r.IfName, r.Netns, why, a.args.ContainerID)
	}
	return nil
}

// readHostFacts reads the VF's PF and index from sysfs and renders its
// stable altname. Its RDMA devices are looked for once it is located.
func (p *Plugin) readHostFacts(a *attachment) error {
	vf, err := p.sys.ReadFunction(a.pci)
	if errors.Is(err, sysfs.ErrNoDevice) {
		return cniErr(ErrVFNotFound, "VF %s: no such PCI device under %s (is deviceID right and sysfsRoot the host's sysfs?)",
			a.pci, p.sys.PCIPath(a.pci))
	}
	if err != nil {
		return cniErr(types.ErrIOFailure, "VF %s: %v", a.pci, err)
	}
	a.vf = vf
	if a.altName, err = config.RenderAltName(p.conf.AltName, a.pci, vf.PF, vf.Index); err != nil {
		return cniErr(types.ErrInvalidNetworkConfig, "%v", err)
	}
	return nil
}

// locateVF finds the VF in the pod netns by PCI parent, bus-info or altname.
func (p *Plugin) locateVF(h *vfnet.Handle, a *attachment) error {
	f, err := h.Locate(a.pci, a.altName)
	if err != nil {
		return err
	}
	if f.AltHolder != nil {
		return cniErr(ErrConflict, "VF %s in netns %s: its altname %s is held by another link, %s",
			a.pci, h.Netns(), a.altName, f.AltHolder.Attrs().Name)
	}
	a.link, a.foundAs = f.Link, f.Link.Attrs().Name
	p.log.Debug("located VF", "vf", a.pci, "name", a.foundAs, "by", f.By)
	return nil
}

// repairName renames the VF to CNI_IFNAME when something (udev, a racing
// rename) changed it. CNI_IFNAME held by another link is a conflict.
func (p *Plugin) repairName(h *vfnet.Handle, a *attachment) error {
	want := a.args.IfName
	if a.foundAs == want {
		return nil
	}
	holder, err := h.LinkByName(want)
	if err != nil {
		return err
	}
	if holder != nil {
		return cniErr(ErrConflict, "VF %s in netns %s is named %s, but %s is held by another link (%s); nothing changed",
			a.pci, h.Netns(), a.foundAs, want, strings.Join(vfnet.Describe([]netlink.Link{holder}), ""))
	}
	if err := h.Rename(a.link, want); err != nil {
		return err
	}
	link := a.link
	a.onUndo(func() {
		if l, err := h.Refresh(link); err == nil {
			_ = h.Rename(l, a.foundAs)
		}
		crashpoint.Hit(crashpoint.UndoRenamedBack)
	})
	crashpoint.Hit(crashpoint.Renamed)
	p.log.Warn("repaired VF name", "vf", a.pci, "netns", h.Netns(), "was", a.foundAs, "now", want)
	return p.refresh(h, a)
}

// ensureAltName adds the stable altname when the VF lacks it.
func (p *Plugin) ensureAltName(h *vfnet.Handle, a *attachment) error {
	if slices.Contains(a.link.Attrs().AltNames, a.altName) {
		return nil
	}
	if err := h.AddAltName(a.link, a.altName); err != nil {
		return err
	}
	a.added = true
	link := a.link
	a.onUndo(func() {
		if l, err := h.Refresh(link); err == nil {
			_ = h.DelAltName(l, a.altName)
		}
	})
	crashpoint.Hit(crashpoint.AltNameAdded)
	return p.refresh(h, a)
}

// findRDMA looks for the VF's RDMA devices once, wherever the kernel keeps
// them: the host's sysfs, or the pod netns in RDMA netns exclusive mode
// (package rdma). The checks and the port wait read what it found.
func (p *Plugin) findRDMA(h *vfnet.Handle, a *attachment) error {
	l, err := rdma.Finder{Sys: p.sys, ThreadLocked: p.threadLocked}.Find(rdma.VF{
		PCI: a.pci, PF: a.vf.PF, Netns: h.NS(), NetnsPath: h.Netns(), IfIndex: a.link.Attrs().Index,
		IPoIB: vfnet.LinkLayer(a.link) == config.LinkLayerInfiniBand, WantInfiniBand: p.conf.LinkLayer == config.LinkLayerInfiniBand,
	})
	if err != nil {
		return cniErr(types.ErrIOFailure, "VF %s: %v", a.pci, err)
	}
	a.rdma = l
	if len(l.Devices) > 0 {
		p.log.Debug("found RDMA device", "vf", a.pci, "rdma", l.Devices[0].Name, "where", l.Devices[0].Source, "netns", l.Devices[0].Netns)
	}
	return nil
}

func (p *Plugin) refresh(h *vfnet.Handle, a *attachment) error {
	l, err := h.Refresh(a.link)
	if err != nil {
		return err
	}
	a.link = l
	return nil
}

// verify checks link layer, GUID and MTU, then waits for the port.
func (p *Plugin) verify(h *vfnet.Handle, a *attachment) error {
	a.obs = observe(a)
	if err := p.verifyRDMAFound(a); err != nil {
		return err
	}
	if err := p.verifyLinkLayer(a); err != nil {
		return err
	}
	if err := p.verifyGUID(a); err != nil {
		return err
	}
	if err := p.verifyMTU(a); err != nil {
		return err
	}
	return p.verifyPort(h, a)
}

func observe(a *attachment) *drift.Observation {
	return drift.ObserveLink(a.link, a.rdma.Devices)
}

func (p *Plugin) verifyLinkLayer(a *attachment) error {
	want := p.conf.LinkLayer
	if want == config.LinkLayerAuto || a.obs.LinkLayer == want {
		return nil
	}
	return cniErr(ErrMismatch, "VF %s in netns %s: link layer is %s, expected %s (port fell back from InfiniBand? check the HCA's link type)",
		a.pci, a.args.Netns, a.obs.LinkLayer, want)
}

// verifyRDMAFound refuses a VF that must have an RDMA device (its PF has
// one, it is IPoIB, or InfiniBand is configured) when none was found
// anywhere: its GUID and port checks would otherwise pass in silence,
// which is what the host's view of RDMA netns exclusive mode used to do.
// It follows guidPolicy, as the GUID check it stands in for.
func (p *Plugin) verifyRDMAFound(a *attachment) error {
	problem := a.rdma.Missing()
	switch {
	case problem == "" || p.conf.GUIDPolicy == config.PolicyIgnore:
		return nil
	case p.conf.GUIDPolicy == config.PolicyWarn:
		p.log.Warn("no RDMA device found; GUID and port not checked, continuing under guidPolicy=warn",
			"vf", a.pci, "netns", a.args.Netns, "problem", problem)
		return nil
	}
	return cniErr(ErrBadGUID, "VF %s in netns %s: %s", a.pci, a.args.Netns, problem)
}

// verifyGUID refuses a zero, all-F or duplicated node GUID.
func (p *Plugin) verifyGUID(a *attachment) error {
	if p.conf.GUIDPolicy == config.PolicyIgnore || len(a.rdma.Devices) == 0 {
		return nil
	}
	p.chooseGUIDIndex(a)
	problem := p.guidProblem(a)
	if problem == "" {
		return nil
	}
	if p.conf.GUIDPolicy == config.PolicyWarn {
		p.log.Warn("GUID problem, continuing under guidPolicy=warn", "vf", a.pci, "problem", problem)
		return nil
	}
	return cniErr(ErrBadGUID, "VF %s in netns %s: %s", a.pci, a.args.Netns, problem)
}

// chooseGUIDIndex picks the node's GUID index for the duplicate check. The
// index saved in the state directory is reused while class/infiniband
// lists the same devices as when it was read and it agrees with the VF's
// own GUIDs just read (see sysfs.GUIDIndex). Otherwise verifyGUID scans
// every RDMA device's GUID and saves the index for the next ADD.
func (p *Plugin) chooseGUIDIndex(a *attachment) {
	if idx := p.savedGUIDIndex(a); idx != nil {
		a.guids, a.saved = func() (*sysfs.GUIDIndex, error) { return idx, nil }, true
		return
	}
	a.guids = p.scanGUIDs
}

// savedGUIDIndex is the saved GUID index if it is current, else nil.
func (p *Plugin) savedGUIDIndex(a *attachment) *sysfs.GUIDIndex {
	data, err := p.store.LoadGUIDIndex()
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("cannot read the saved GUID index; scanning", "err", err)
		}
		return nil
	}
	idx := new(sysfs.GUIDIndex)
	if err := idx.UnmarshalText(data); err != nil {
		p.log.Warn("ignoring the saved GUID index; scanning", "err", err)
		return nil
	}
	if ok, err := p.sys.Current(idx); err != nil || !ok {
		return nil
	}
	for _, d := range a.rdma.Devices {
		if d.Source != rdma.HostSysfs {
			continue // not in the host's class/infiniband, so not in the index
		}
		if g, ok := idx.GUIDs[d.Name]; !ok || g != d.NodeGUID {
			return nil
		}
	}
	return idx
}

// scanGUIDs reads every RDMA device's GUID and saves the index. A failed
// save only costs the next ADD a scan.
func (p *Plugin) scanGUIDs() (*sysfs.GUIDIndex, error) {
	idx, err := p.sys.ScanGUIDs()
	if err != nil {
		return nil, err
	}
	data, err := idx.MarshalText()
	if err == nil {
		err = p.store.SaveGUIDIndex(data)
	}
	if err != nil {
		p.log.Warn("cannot save the GUID index; the next ADD scans again", "err", err)
	}
	return idx, nil
}

// guidProblem explains what is wrong with the VF's node GUIDs, or "".
func (p *Plugin) guidProblem(a *attachment) string {
	for _, d := range a.rdma.Devices {
		if !d.NodeGUID.Valid() {
			return fmt.Sprintf("%s node GUID is %s, expected an assigned GUID (assign it through PF %s, VF index %d, "+
				"before kubelet starts: sriov-stable-agent hostconfig generates a boot unit that does it)", d.Name, d.NodeGUID, a.vf.PF, a.vf.Index)
		}
	}
	idx, err := a.guids()
	if err == nil && a.saved {
		if _, other := p.duplicate(idx, a); other != "" {
			// Fail a pod start on what the node holds now, not on what
			// it held when the index was saved.
			idx, err = p.scanGUIDs()
		}
	}
	if err != nil {
		return fmt.Sprintf("cannot list the node's GUIDs for the duplicate check: %v", err)
	}
	if d, other := p.duplicate(idx, a); other != "" {
		return fmt.Sprintf("%s node GUID %s is also held by %s (duplicate GUIDs break the fabric)", d.Name, d.NodeGUID, p.sys.DevicePCI(other))
	}
	if d, other := p.attachedDuplicate(a); other != "" {
		return fmt.Sprintf("%s node GUID %s is also held by %s (duplicate GUIDs break the fabric)", d.Name, d.NodeGUID, other)
	}
	return p.fabricDuplicate(a)
}

// fabricDuplicate is the fabric controller's verdict on the VF, as the
// node agent mirrors it into the state directory (state.FabricVerdicts):
// a node or port GUID of the VF that a VF of another node published first
// (docs/fabric.md). No file (the ledger is not deployed), an unreadable
// one (logged) or a verdict about a GUID the VF no longer has is none: the
// plugin never calls the API server.
func (p *Plugin) fabricDuplicate(a *attachment) string {
	v, err := p.store.LoadFabricVerdicts()
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("cannot read the fabric verdicts; this node's GUIDs are checked alone", "err", err)
		}
		return ""
	}
	for _, f := range v.VFs[a.pci] {
		if !f.Second || len(f.Others) == 0 {
			continue
		}
		for _, d := range a.rdma.Devices {
			what := ""
			switch {
			case f.Kind == "DuplicateNodeGUID" && d.NodeGUID.String() == f.GUID:
				what = "node GUID"
			case f.Kind == "DuplicatePortGUID" && slices.ContainsFunc(d.Ports, func(pt sysfs.Port) bool { return pt.GUID.String() == f.GUID }):
				what = "port GUID"
			default:
				continue
			}
			others := f.Others[:min(len(f.Others), 3)]
			return fmt.Sprintf("%s %s %s is also held on the fabric by %s, which published it first (the fabric controller's verdict, "+
				"mirrored at %s); give this VF a GUID unique on the fabric (sriov-stable-agent hostconfig apply) or move the pod to another VF",
				d.Name, what, f.GUID, strings.Join(others, ", "), v.Mirrored.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// attachedDuplicate finds, in RDMA netns exclusive mode, another attached
// VF whose node GUID, as its ADD recorded it, is one of ours: its device
// sits in its pod's netns, where the host's GUID index cannot see it. ADD
// enters each attached VF in the state dir's GUID directory
// (state.VFLock.IndexGUID); a match counts only while the owner's record
// says so and its netns is alive (else the device is back in the host's
// view, and in the index). It takes the lock of each of the VF's GUIDs
// first and ADD keeps them until it returns, past its own entry and
// record, so an ADD of another VF with one of these GUIDs waits, then sees
// this one (state.GUIDLock).
func (p *Plugin) attachedDuplicate(a *attachment) (rdma.Device, string) {
	if !(rdma.Finder{Sys: p.sys}).ExclusiveMode() {
		return rdma.Device{}, ""
	}
	var guids []string
	for _, d := range a.rdma.Devices {
		guids = append(guids, d.NodeGUID.String())
	}
	slices.Sort(guids)
	for _, g := range slices.Compact(guids) {
		l, err := p.store.LockGUID(g)
		if err != nil {
			p.log.Warn("cannot lock the GUID for the duplicate check; an ADD of another VF with it at the same time may pass too",
				"vf", a.pci, "guid", g, "err", err)
			continue
		}
		a.guidLocks = append(a.guidLocks, l)
	}
	for _, d := range a.rdma.Devices {
		g := d.NodeGUID.String()
		owners, err := p.store.OwnersOf(g)
		if err != nil {
			p.log.Warn("cannot read the attached VFs' GUIDs for the duplicate check", "err", err)
		}
		for _, o := range owners {
			if o.PCI == a.pci {
				continue
			}
			rec, err := p.store.Owner(o)
			if err != nil || rec.PCI != o.PCI || rec.NodeGUID != g || !vfnet.NetnsAlive(rec.Netns) {
				continue
			}
			return d, fmt.Sprintf("VF %s, attached to %s in netns %s", o.PCI, podOf(rec), rec.Netns)
		}
	}
	return rdma.Device{}, ""
}

// podOf names an attachment's pod for people.
func podOf(rec *state.Record) string {
	if rec.PodName != "" {
		return "pod " + rec.PodNamespace + "/" + rec.PodName
	}
	return "container " + rec.ContainerID
}

// duplicate finds an RDMA device of the VF whose node GUID another device
// of the node holds too, and names that other device; "" when none does.
// The index is the host's: an entry is one of ours when it is a device
// found in the host's sysfs, or, in shared mode (where a device has one
// name on the whole node), one of the same name found elsewhere (a
// soft-RoCE device found by its netdev). In exclusive mode a device in a
// pod is not in the index, and an entry of the same name is another one.
func (p *Plugin) duplicate(idx *sysfs.GUIDIndex, a *attachment) (rdma.Device, string) {
	exclusive := sync.OnceValue(rdma.Finder{Sys: p.sys}.ExclusiveMode)
	ours := func(name string) bool {
		return slices.ContainsFunc(a.rdma.Devices, func(own rdma.Device) bool {
			return own.Name == name && (own.Source == rdma.HostSysfs || !exclusive())
		})
	}
	for _, d := range a.rdma.Devices {
		for _, name := range idx.Holders(d.NodeGUID) {
			if !ours(name) {
				return d, name
			}
		}
	}
	return rdma.Device{}, ""
}

func (p *Plugin) verifyMTU(a *attachment) error {
	if p.conf.MTU == 0 || a.obs.MTU == p.conf.MTU {
		return nil
	}
	return cniErr(ErrMismatch, "VF %s in netns %s: MTU is %d, expected %d", a.pci, a.args.Netns, a.obs.MTU, p.conf.MTU)
}

// verifyPort waits up to portWaitMs, polling, for every RDMA port to be
// ACTIVE/LinkUp (or, without RDMA, for carrier).
func (p *Plugin) verifyPort(h *vfnet.Handle, a *attachment) error {
	if p.conf.PortPolicy == config.PolicyIgnore {
		return nil
	}
	deadline := time.Now().Add(p.conf.PortWait())
	problem := a.obs.PortProblem()
	for problem != "" && time.Now().Before(deadline) {
		time.Sleep(min(portPollInterval, time.Until(deadline)))
		if err := p.repoll(h, a); err != nil {
			return err
		}
		problem = a.obs.PortProblem()
	}
	if problem == "" {
		return nil
	}
	if p.conf.PortPolicy == config.PolicyWarn {
		p.log.Warn("port not up, continuing under portPolicy=warn", "vf", a.pci, "problem", problem)
		return nil
	}
	return cniErr(ErrPortDown, "VF %s in netns %s: %s after waiting %s", a.pci, a.args.Netns, problem, p.conf.PortWait())
}

func (p *Plugin) repoll(h *vfnet.Handle, a *attachment) error {
	if len(a.rdma.Devices) > 0 {
		if err := a.rdma.Refresh(); err != nil {
			return err
		}
	} else if err := p.refresh(h, a); err != nil {
		return err
	}
	a.obs = observe(a)
	return nil
}

// recordAttachment writes the attachment record; its undo removes it.
func (p *Plugin) recordAttachment(_ *vfnet.Handle, a *attachment) error {
	rec := &state.Record{
		Network: p.conf.Name, ContainerID: a.args.ContainerID, IfName: a.args.IfName, Netns: a.args.Netns,
		PodNamespace: string(a.pod.K8S_POD_NAMESPACE), PodName: string(a.pod.K8S_POD_NAME), PodUID: string(a.pod.K8S_POD_UID),
		PCI: a.pci, PF: a.vf.PF, VFIndex: a.vf.Index, AltName: a.altName, AddedAltName: a.added,
		FoundAs: a.foundAs, MAC: a.obs.MAC, MTU: a.obs.MTU, LinkLayer: a.obs.LinkLayer, NodeGUID: a.obs.NodeGUID(),
		PortPolicy: string(p.conf.PortPolicy), GUIDPolicy: string(p.conf.GUIDPolicy), SysfsRoot: p.conf.SysfsRoot,
		Created: time.Now().UTC(),
	}
	for _, d := range a.rdma.Devices {
		rec.RDMA = append(rec.RDMA, d.Name)
		rec.RDMASource = string(d.Source)
	}
	// The index first: a record is never without it (see state.VFLock).
	if err := a.lock.SetOwner(rec.Key(), rec.NodeGUID); err != nil {
		return cniErr(types.ErrIOFailure, "VF %s: cannot record the attachment: %v", a.pci, err)
	}
	a.onUndo(func() {
		_ = a.lock.Free(rec.Key())
		crashpoint.Hit(crashpoint.UndoOwnerFreed)
	})
	crashpoint.Hit(crashpoint.OwnerSet)
	if rec.NodeGUID != "" && (rdma.Finder{Sys: p.sys}).ExclusiveMode() {
		if err := a.lock.IndexGUID(rec.Key(), rec.NodeGUID); err != nil {
			return cniErr(types.ErrIOFailure, "VF %s: cannot record the attachment: %v", a.pci, err)
		}
	}
	if err := p.store.Save(rec); err != nil {
		return cniErr(types.ErrIOFailure, "VF %s: cannot record the attachment: %v", a.pci, err)
	}
	a.onUndo(func() { _ = p.store.Delete(rec.Key()) })
	crashpoint.Hit(crashpoint.Recorded)
	return nil
}

// asCNIError turns an error from the netns steps into a CNI error with
// the plugin's code, keeping CNI errors as they are.
func asCNIError(err error, a *attachment) error {
	var cerr *types.Error
	var nf *vfnet.NotFoundError
	var conflict *vfnet.AltNameConflictError
	switch {
	case errors.As(err, &cerr):
		return cerr
	case errors.As(err, &nf):
		return cniErr(ErrVFNotFound, "%v", nf)
	case errors.As(err, &conflict):
		return cniErr(ErrConflict, "%v", conflict)
	}
	return cniErr(types.ErrInternal, "VF %s in netns %s: %v", a.pci, a.args.Netns, err)
}
