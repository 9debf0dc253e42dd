package plugin

import (
	"errors"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// Del hands the VF back to the plugin before us, which DELs after us: if
// the VF is in the pod under another name it gets CNI_IFNAME again, an
// altname we added is removed, and the record goes. A missing netns, link,
// record or prevResult is not an error, and DEL is safe to repeat.
func (p *Plugin) Del(args *skel.CmdArgs) error {
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
	if unlock, err := p.store.LockVF(pci); err == nil {
		defer unlock()
	} else {
		p.log.Warn("DEL: cannot lock VF, going on", "vf", pci, "err", err)
	}
	if rec == nil && p.ownedByOther(pci, key) {
		p.log.Warn("DEL: VF belongs to another attachment now; leaving it alone", "vf", pci, "container", args.ContainerID)
		return nil
	}
	if args.Netns != "" {
		err := vfnet.InNetns(args.Netns, func(h *vfnet.Handle) error { return p.handBack(h, args, pci, altName, rec) })
		switch {
		case errors.Is(err, vfnet.ErrNetnsGone):
			p.log.Info("DEL: pod netns is gone; the kernel returned the VF to the host", "vf", pci, "netns", args.Netns)
		case err != nil:
			// Keep the record: a retried DEL can finish the job.
			return cniErr(types.ErrTryAgainLater, "DEL of VF %s in netns %s: %v", pci, args.Netns, err)
		}
	}
	if err := p.store.Delete(key); err != nil {
		p.log.Warn("DEL: cannot remove record", "err", err)
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
	if p.conf.RawPrevResult != nil {
		if version.ParsePrevResult(&p.conf.PluginConf) == nil {
			prev, _ = current.NewResultFromResult(p.conf.PrevResult)
		}
	}
	pci, _, err := resolvePCI(p.conf, prev, args.Netns, args.IfName)
	if err != nil {
		return "", ""
	}
	altName := ""
	if vf, err := p.sys.ReadVF(pci); err == nil {
		altName, _ = config.RenderAltName(p.conf.AltName, pci, vf.PF, vf.Index)
	}
	return pci, altName
}

// ownedByOther reports whether another attachment's record claims the VF:
// a late DEL of an old container must not touch the new owner's VF.
func (p *Plugin) ownedByOther(pci string, self state.Key) bool {
	recs, _ := p.store.List()
	return slices.ContainsFunc(recs, func(r *state.Record) bool { return r.PCI == pci && r.Key() != self })
}

// handBack renames the VF to CNI_IFNAME and removes an altname we added.
func (p *Plugin) handBack(h *vfnet.Handle, args *skel.CmdArgs, pci, altName string, rec *state.Record) error {
	f, err := h.Locate(pci, altName)
	var nf *vfnet.NotFoundError
	var conflict *vfnet.AltNameConflictError
	if errors.As(err, &nf) || errors.As(err, &conflict) {
		p.log.Info("DEL: VF not in the pod netns; nothing to hand back", "vf", pci, "netns", args.Netns)
		return nil
	}
	if err != nil {
		return err
	}
	link := f.Link
	if rec != nil && rec.AddedAltName && slices.Contains(link.Attrs().AltNames, rec.AltName) {
		if err := h.DelAltName(link, rec.AltName); err != nil {
			p.log.Warn("DEL: cannot remove the altname we added", "vf", pci, "err", err)
		}
	}
	if link.Attrs().Name == args.IfName {
		return nil
	}
	holder, err := h.LinkByName(args.IfName)
	if err != nil {
		return err
	}
	if holder != nil {
		p.log.Warn("DEL: CNI_IFNAME is held by another link; leaving the VF under its current name",
			"vf", pci, "name", link.Attrs().Name, "holder", vfnet.Describe([]netlink.Link{holder}))
		return nil
	}
	if link, err = h.Refresh(link); err != nil {
		return err
	}
	if err := h.Rename(link, args.IfName); err != nil {
		return err
	}
	p.log.Warn("DEL: renamed VF back for the plugin before us", "vf", pci, "was", f.Link.Attrs().Name, "now", args.IfName)
	return nil
}
