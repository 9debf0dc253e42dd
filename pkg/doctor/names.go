package doctor

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// hostLink is what netlink says about a link in this network namespace.
type hostLink struct {
	name      string
	altNames  []string
	parentDev string // PCI address when the parent bus is pci
}

// listLinks lists the links of the calling thread's network namespace
// with their altnames and parent devices, which sysfs does not show, and
// indexes them by name, altname and parent device for the name checks.
// Equivalent to: ip -d link show
func (r *run) listLinks() {
	h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		r.linkErr = fmt.Errorf("open netlink socket: %w", err)
		return
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		r.linkErr = fmt.Errorf("list links: %w", err)
		return
	}
	r.rawLinks = links
	r.links = make([]hostLink, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		hl := hostLink{name: a.Name, altNames: a.AltNames}
		if a.ParentDevBus == "pci" {
			hl.parentDev = a.ParentDev
		}
		r.links = append(r.links, hl)
	}
	r.byName = map[string]*hostLink{}
	r.byAlt = map[string]*hostLink{}
	r.byParent = map[string][]*hostLink{}
	for i := range r.links {
		l := &r.links[i]
		r.byName[l.name] = l
		for _, a := range l.altNames {
			r.byAlt[a] = l
		}
		if l.parentDev != "" {
			r.byParent[l.parentDev] = append(r.byParent[l.parentDev], l)
		}
	}
}

// checkNames checks the host netdev of every Mellanox VF that has one: its
// name against the naming policy, and that it carries the plugin's stable
// altname. VFs inside pods have no host netdev and are not judged here
// (the monitor judges attachments).
func (r *run) checkNames() {
	var elsewhere []string
	for _, f := range r.inv.vfs {
		names := append([]string(nil), f.netdevs...)
		for _, l := range r.byParent[f.addr] {
			if !slices.Contains(names, l.name) {
				names = append(names, l.name)
			}
		}
		for _, name := range names {
			r.checkName(f, name)
			if r.linkErr != nil {
				continue
			}
			l, ok := r.byName[name]
			if !ok {
				elsewhere = append(elsewhere, name)
				continue
			}
			r.checkAltName(f, l)
		}
	}
	switch linkErr := r.linkErr; {
	case linkErr != nil:
		remedy := "run as root in the host network namespace"
		if !errors.Is(linkErr, unix.EPERM) && !errors.Is(linkErr, unix.EACCES) {
			remedy = "run in the host network namespace with netlink access"
		}
		r.add(SeverityInfo, finding.CheckVFAltName, "node", remedy, "altnames of host VF netdevs not checked: %v", linkErr)
	case len(elsewhere) > 0:
		r.netdevsElsewhere = true
		sort.Strings(elsewhere)
		r.add(SeverityInfo, finding.CheckVFAltName, "node", "run the doctor in the network namespace sysfs was mounted in (the host's)",
			"altnames of %d VF netdevs not checked: sysfs under %s lists them (%s) but this network namespace has no such links",
			len(elsewhere), r.sys.Root, truncate(strings.Join(elsewhere, ", "), 120))
	}
}

func (r *run) checkName(f *function, name string) {
	const remedy = "give VFs persistent names before kubelet starts: install the systemd .link files from sriov-stable-agent hostconfig, " +
		"then udevadm trigger --action=add /sys/bus/pci/devices/<VF>"
	switch p := r.opts.NamePattern; {
	case p != nil:
		if !p.MatchString(name) {
			r.add(SeverityWarning, finding.CheckVFName, f.addr, remedy,
				"VF %s (PF %s VF %d) is named %q, which does not match the naming policy %q", f.addr, f.pf, f.index, name, p.String())
		}
	case vfnet.KindOf(name) == vfnet.NamePod:
		r.add(SeverityWarning, finding.CheckVFName, f.addr,
			"rename it back to its policy name (ip link set "+name+" name <name>) or rebind the VF so udev names it",
			"VF %s (PF %s VF %d) is named %q on the host, a pod interface name: it came back from a deleted pod network namespace", f.addr, f.pf, f.index, name)
	case vfnet.KindOf(name).Kernel():
		r.add(SeverityWarning, finding.CheckVFName, f.addr, remedy,
			"VF %s (PF %s VF %d) has the kernel's name %q: no persistent naming rule applied, so its name depends on probe order", f.addr, f.pf, f.index, name)
	}
}

func (r *run) checkAltName(f *function, l *hostLink) {
	want, err := config.RenderAltName(r.opts.AltName, f.addr, f.pf, f.index)
	if err != nil {
		r.add(SeverityWarning, finding.CheckVFAltName, f.addr, "fix the alt-name template", "no altname to expect for VF %s: %v", f.addr, err)
		return
	}
	if l.name == want || slices.Contains(l.altNames, want) {
		return // already reachable by its stable name
	}
	holder := r.byAlt[want]
	if holder == nil {
		holder = r.byName[want]
	}
	if holder != nil {
		r.add(SeverityError, finding.CheckVFAltName, f.addr,
			fmt.Sprintf("remove it from the wrong link: ip link property del dev %s altname %s (the plugin refuses ADD while another link holds it)", holder.name, want),
			"altname %s of VF %s is held by another link, %s", want, f.addr, holder.name)
		return
	}
	r.add(SeverityWarning, finding.CheckVFAltName, f.addr,
		fmt.Sprintf("ip link property add dev %s altname %s, or install the hostconfig .link files (AlternativeName=%s)", l.name, want, want),
		"VF %s netdev %s lacks its stable altname %s", f.addr, l.name, want)
}
