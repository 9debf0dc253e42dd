package plugin

import (
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// GC removes this network's records whose attachment is not in
// cni.dev/valid-attachments. libcni has already sent DEL for each of them.
func (p *Plugin) GC(_ *skel.CmdArgs) error {
	valid := make(map[state.Key]bool, len(p.conf.ValidAttachments))
	for _, v := range p.conf.ValidAttachments {
		valid[state.Key{Network: p.conf.Name, ContainerID: v.ContainerID, IfName: v.IfName}] = true
	}
	if boot, err := bootTime(); err == nil {
		removed, err := p.store.RemoveUnreadableBefore(boot)
		for _, name := range removed {
			p.log.Info("GC: removed an unreadable record from before boot", "file", name)
		}
		if err != nil {
			p.log.Warn("GC: cannot remove unreadable records", "err", err)
		}
	}
	recs, err := p.store.List()
	if err != nil {
		p.log.Warn("GC: some records are unreadable", "err", err)
	}
	for _, r := range recs {
		if r.Network != p.conf.Name || valid[r.Key()] {
			continue
		}
		if err := p.store.Delete(r.Key()); err != nil {
			return cniErr(types.ErrIOFailure, "GC: %v", err)
		}
		p.log.Info("GC: removed stale record", "container", r.ContainerID, "ifname", r.IfName, "vf", r.PCI)
	}
	return nil
}

// bootTime is when the node booted, a minute early to be safe against the
// uptime's rounding: records written before it describe dead netns.
func bootTime() (time.Time, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return time.Time{}, err
	}
	return time.Now().Add(-time.Duration(si.Uptime)*time.Second - time.Minute), nil
}

// Status reports whether ADD can work: the state directory is writable and
// the sysfs root readable. Error 50 otherwise.
func (p *Plugin) Status(_ *skel.CmdArgs) error {
	if err := p.store.Writable(); err != nil {
		return cniErr(types.ErrPluginNotAvailable, "%v", err)
	}
	if err := p.sys.Readable(); err != nil {
		return cniErr(types.ErrPluginNotAvailable, "%v", err)
	}
	return nil
}
