package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	cnins "github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/crashpoint"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Del hands the VF back to the plugin before us, which DELs after us: if
// the VF is in the pod under another name it gets CNI_IFNAME again, an
// altname we added is removed, and the record goes. A missing netns, link,
// record or prevResult is not an error, and DEL is safe to repeat.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	if p.conf.PathError != nil {
		// ADD rejects this configuration's paths, so it has no record, and
		// the defaults standing in for them belong to other networks: hand
		// the VF back without reading or writing any state.
		p.log.Warn("DEL: unusable path in the configuration; handing the VF back without state", "err", p.conf.PathError)
		pci, altName := p.delTarget(args, nil)
		if pci == "" {
			return nil
		}
		return p.handBackIn(args, pci, altName, nil)
	}
	key := state.Key{Network: p.conf.Name, ContainerID: args.ContainerID, IfName: args.IfName}
	rec, err := p.store.Load(key)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		p.log.Warn("DEL: unreadable record, going on without it", "err", err)
	}
	pci, altName := p.delTarget(args, rec)
	if pci == "" {
		p.log.Info("DEL: no record and no PCI address; nothing to hand back", "container", args.ContainerID, "ifname", args.IfName)
		return p.store.Delete(key)
	}
	lock, err := p.store.LockVF(pci)
	if err == nil {
		defer lock.Unlock()
	} else {
		p.log.Warn("DEL: cannot lock VF, going on", "vf", pci, "err", err)
	}
	if rec == nil && p.ownedByOther(lock, pci, key) {
		p.log.Warn("DEL: VF belongs to another attachment now; leaving it alone", "vf", pci, "container", args.ContainerID)
		return nil
	}
	if err := p.handBackIn(args, pci, altName, rec); err != nil {
		// Keep the record: a retried DEL can finish the job.
		return err
	}
	crashpoint.Hit(crashpoint.DelHandedBack)
	if err := p.store.Delete(key); err != nil {
		p.log.Warn("DEL: cannot remove record", "err", err)
	} else if lock != nil {
		crashpoint.Hit(crashpoint.DelRecordRemoved)
		if err := lock.Free(key); err != nil {
			p.log.Warn("DEL: cannot clear the VF's owner index", "vf", pci, "err", err)
		}
	}
	p.log.Info("detached", "vf", pci, "netns", args.Netns, "ifname", args.IfName, "container", args.ContainerID)
	return nil
}

// handBackIn runs handBack in the pod netns, if DEL names one; a netns that
// is gone is not an error.
func (p *Plugin) handBackIn(args *skel.CmdArgs, pci, altName string, rec *state.Record) error {
	if args.Netns == "" {
		return nil
	}
	own, cerr := cnins.CheckNetNS(args.Netns)
	if cerr != nil {
		return cniErr(types.ErrTryAgainLater, "DEL of VF %s: cannot tell whether netns %s is the host's: %s", pci, args.Netns, cerr.Msg)
	}
	if own {
		// ADD refuses this netns, so no VF was attached there; whatever
		// answers to the VF's address or altname is the host's own.
		p.log.Warn("DEL: CNI_NETNS is the host's network namespace, not a pod's; leaving every host interface alone",
			"vf", pci, "netns", args.Netns)
		return nil
	}
	// A handle in our own (the host's) netns, opened before entering the
	// pod's: handBack checks against it that the VF's way home is free.
	host, err := vfnet.OpenHere()
	if err != nil {
		p.log.Warn("DEL: cannot look at the host's links; not checking the VF's host name", "err", err)
	} else {
		defer host.Close()
	}
	err = vfnet.InNetns(args.Netns, func(h *vfnet.Handle) error {
		link, err := p.handBack(h, args, pci, altName, rec)
		if err != nil || link == nil {
			return err
		}
		return p.freeHostName(h, host, link, pci)
	})
	switch {
	case errors.Is(err, vfnet.ErrNetnsGone):
		p.log.Info("DEL: pod netns is gone; the kernel returned the VF to the host", "vf", pci, "netns", args.Netns)
	case err != nil:
		return cniErr(types.ErrTryAgainLater, "DEL of VF %s in netns %s: %v", pci, args.Netns, err)
	}
	return nil
}

// delTarget finds the VF's PCI address and altname from the record, else
// from the configuration, the device info file or prevResult, ignoring
// anything malformed.
func (p *Plugin) delTarget(args *skel.CmdArgs, rec *state.Record) (string, string) {
	if rec != nil {
		return rec.PCI, rec.AltName
	}
	var prev *current.Result
	if p.conf.HasPrevResult() {
		prev, _ = parsePrevResult(p.conf) // nil when malformed
	}
	pci, _, err := resolvePCI(p.conf, prev, args.Netns, args.IfName)
	if err != nil {
		return "", ""
	}
	altName := ""
	if vf, err := p.sys.ReadFunction(pci); err == nil {
		altName, _ = config.RenderAltName(p.conf.AltName, pci, vf.PF, vf.Index)
	}
	return pci, altName
}

// ownedByOther reports whether another attachment's record claims the VF:
// a late DEL of an old container must not touch the new owner's VF.
func (p *Plugin) ownedByOther(lock *state.VFLock, pci string, self state.Key) bool {
	claims := p.store.Claims
	if lock != nil {
		claims = lock.Claims
	}
	recs, _ := claims(pci, self)
	return len(recs) > 0
}

// freeHostName makes sure the host name host-device will restore (kept in
// the link's alias) is free on the host. A VF that came back from a deleted
// pod netns keeps its pod name (net1) on the host; host-device records that
// as its host name on the next ADD, and when another VF has taken it by the
// DEL, host-device's move home fails with EEXIST on every retry and the VF
// is stranded. We point the alias at a free name derived from the PCI
// address instead; udev's .link rules rename it on the host as usual.
func (p *Plugin) freeHostName(h *vfnet.Handle, host *vfnet.Handle, link netlink.Link, pci string) error {
	if host == nil {
		return nil
	}
	alias := link.Attrs().Alias
	if alias == "" || !vfnet.KindOf(alias).Transient() && !host.Taken(alias) {
		return nil
	}
	free := vfnet.FallbackName(pci)
	for i := 0; host.Taken(free); i++ {
		if i == 9 {
			return fmt.Errorf("VF %s: its host name %s is taken on the host, and so are the fallbacks", pci, alias)
		}
		free = vfnet.FallbackName(pci) + strconv.Itoa(i)
	}
	if err := h.SetAlias(link, free); err != nil {
		return err
	}
	p.log.Warn("DEL: the VF's host name is taken or transient; it goes home under a name of its own",
		"vf", pci, "taken", alias, "now", free)
	return nil
}

// handBack renames the VF to CNI_IFNAME and removes an altname we added.
// It returns the VF's link, nil when the VF is not in the pod netns.
func (p *Plugin) handBack(h *vfnet.Handle, args *skel.CmdArgs, pci, altName string, rec *state.Record) (netlink.Link, error) {
	f, err := h.Locate(pci, altName)
	var nf *vfnet.NotFoundError
	var conflict *vfnet.AltNameConflictError
	if errors.As(err, &nf) || errors.As(err, &conflict) {
		p.log.Info("DEL: VF not in the pod netns; nothing to hand back", "vf", pci, "netns", args.Netns)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	link := f.Link
	if rec != nil && rec.AddedAltName && slices.Contains(link.Attrs().AltNames, rec.AltName) {
		if err := h.DelAltName(link, rec.AltName); err != nil {
			p.log.Warn("DEL: cannot remove the altname we added", "vf", pci, "err", err)
		}
	}
	if link.Attrs().Name == args.IfName {
		return link, nil
	}
	holder, err := h.LinkByName(args.IfName)
	if err != nil {
		return nil, err
	}
	if holder != nil {
		p.log.Warn("DEL: CNI_IFNAME is held by another link; leaving the VF under its current name",
			"vf", pci, "name", link.Attrs().Name, "holder", vfnet.Describe([]netlink.Link{holder}))
		return link, nil
	}
	if link, err = h.Refresh(link); err != nil {
		return nil, err
	}
	if err := h.Rename(link, args.IfName); err != nil {
		return nil, err
	}
	p.log.Warn("DEL: renamed VF back for the plugin before us", "vf", pci, "was", f.Link.Attrs().Name, "now", args.IfName)
	return link, nil
}
