// Package drift compares what a pod's VF looks like now with what ADD
// recorded (or what the chain's result says). CHECK and the drift monitor
// share it, so both report the same reasons in the same words.
package drift

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// ErrNetnsGone reports that the attachment's network namespace vanished.
var ErrNetnsGone = vfnet.ErrNetnsGone

// Reason names one kind of drift; the values are metric label values too.
type Reason string

// Every drift reason.
const (
	Missing        Reason = "missing"
	Renamed        Reason = "renamed"
	AltNameMissing Reason = "altname-missing"
	MAC            Reason = "mac"
	RDMAMissing    Reason = "rdma-missing"
	GUID           Reason = "guid"
	MTU            Reason = "mtu"
	LinkLayer      Reason = "link-layer"
	PortDown       Reason = "port-down"
)

// Reasons lists every reason, for metrics that must show zeros.
var Reasons = []Reason{Missing, Renamed, AltNameMissing, MAC, RDMAMissing, GUID, MTU, LinkLayer, PortDown}

// Finding is one drift with a human-readable detail.
type Finding struct {
	Reason Reason
	Detail string
	// Warn marks a drift the configuration asks to be told of, not failed
	// on (portPolicy warn): CHECK logs it and passes; the monitor, which
	// only ever reports, reports it as it does every drift.
	Warn bool
}

func (f Finding) String() string { return string(f.Reason) + ": " + f.Detail }

// Expect is what the attachment should look like.
type Expect struct {
	PCI, Netns, IfName, AltName string
	PF                          string // the VF's PF; "" when unknown or none
	MAC                         string // "" = no expectation
	MTU                         int    // 0 = no expectation
	LinkLayer                   string // "" = no expectation
	NodeGUID                    string // "" = no expectation
	// RDMA expects an RDMA device to be found (ADD found one and GUIDs are
	// checked): none found anywhere is rdma-missing.
	RDMA bool
	// PortPolicy is what a port that cannot pass traffic (not
	// ACTIVE/LinkUp; no carrier on a plain netdev VF) is: require (a
	// drift; the default, also for ""), warn (a drift marked Warn) or
	// ignore (not looked at). The same for CHECK and the monitor.
	PortPolicy config.Policy
	// IfIndex is the VF's link index when the monitor last found it (0:
	// unknown). It recognizes a link with no bus identity at all by its
	// index and MAC (vfnet.LocateLastSeen), so a veth stand-in that lost
	// its altname reads as altname-missing; CHECK leaves it 0.
	IfIndex int
}

// FromRecord builds the expectation ADD left behind.
func FromRecord(r *state.Record) Expect {
	return Expect{
		PCI: r.PCI, Netns: r.Netns, IfName: r.IfName, AltName: r.AltName, PF: r.PF,
		MAC: r.MAC, MTU: r.MTU, LinkLayer: r.LinkLayer, NodeGUID: r.NodeGUID,
		RDMA: len(r.RDMA) > 0 && r.GUIDPolicy != string(config.PolicyIgnore), PortPolicy: config.Policy(r.PortPolicy),
	}
}

// Observation is what the VF looks like now.
type Observation struct {
	Found     bool
	Present   []string      // the netns's links, when the VF is missing
	Netns     vfnet.NetnsID // the namespace observed
	By        vfnet.Method  // how the VF was found
	IfIndex   int           // the VF's link index
	Name      string
	AltNames  []string
	MAC       string
	MTU       int
	LinkLayer string
	Carrier   bool
	RDMA      []rdma.Device
	// RDMALooked says where the RDMA device was looked for (rdma.Lookup).
	RDMALooked []string
}

// Observe locates the VF by PCI address in its netns and reads its link and
// its RDMA devices, wherever they are (rdma.Finder). A vanished netns
// yields an error wrapping ErrNetnsGone.
func Observe(exp Expect, sys sysfs.Reader) (*Observation, error) {
	var obs *Observation
	err := vfnet.InNetns(exp.Netns, func(h *vfnet.Handle) error {
		var err error
		var l *rdma.Lookup
		obs, _, l, err = ObserveWith(h, exp, sys)
		l.Close()
		return err
	})
	if err != nil {
		return nil, err
	}
	return obs, nil
}

// ObserveWith is Observe through a handle already open in the VF's netns;
// it also returns the VF's link (nil when it is missing), for a caller
// that goes on to change it in the same netns, and the RDMA lookup (nil
// when the VF is missing), which the caller closes.
func ObserveWith(h *vfnet.Handle, exp Expect, sys sysfs.Reader) (*Observation, netlink.Link, *rdma.Lookup, error) {
	id, err := h.NetnsID()
	if err != nil {
		return nil, nil, nil, err
	}
	obs := &Observation{Netns: id}
	f, err := h.LocateLastSeen(exp.PCI, exp.AltName, exp.IfIndex, exp.MAC)
	var nf *vfnet.NotFoundError
	var conflict *vfnet.AltNameConflictError
	switch {
	case errors.As(err, &nf):
		obs.Present = nf.Present
		return obs, nil, nil, nil
	case errors.As(err, &conflict):
		obs.Present = []string{conflict.Error()}
		return obs, nil, nil, nil
	case err != nil:
		return nil, nil, nil, err
	}
	l, err := rdma.Finder{Sys: sys}.Find(LookFor(exp, h, f.Link))
	if err != nil {
		return nil, nil, nil, err
	}
	obs = ObserveLink(f.Link, l.Devices)
	obs.Netns, obs.By, obs.RDMALooked = id, f.By, l.Looked
	return obs, f.Link, l, nil
}

// LookFor is what rdma.Finder needs to find the RDMA device of the VF
// whose link l a handle in its netns located.
func LookFor(exp Expect, h *vfnet.Handle, l netlink.Link) rdma.VF {
	return rdma.VF{PCI: exp.PCI, PF: exp.PF, Netns: h.NS(), NetnsPath: nsPath(h), IfIndex: l.Attrs().Index,
		IPoIB: vfnet.LinkLayer(l) == "infiniband", WantInfiniBand: exp.LinkLayer == "infiniband"}
}

// nsPath is the handle's netns path, "" for the caller's own.
func nsPath(h *vfnet.Handle) string {
	if h.NS() == nil {
		return ""
	}
	return h.Netns()
}

// ObserveLink builds an observation from a located link and the VF's RDMA
// devices; the RDMA port's link layer wins over the netdev's when present.
func ObserveLink(l netlink.Link, devs []rdma.Device) *Observation {
	a := l.Attrs()
	o := &Observation{
		Found: true, IfIndex: a.Index, Name: a.Name, AltNames: a.AltNames, MAC: a.HardwareAddr.String(), MTU: a.MTU,
		LinkLayer: vfnet.LinkLayer(l), Carrier: vfnet.HasCarrier(l), RDMA: devs,
	}
	if ll := rdmaLinkLayer(devs); ll != "" {
		o.LinkLayer = ll
	}
	return o
}

// LinkFingerprint is what an observation takes from a link (ObserveLink),
// with how the link is found (its parent device) and whether it is up,
// as one string: a link notification whose fingerprint is the last one's
// cannot change a check's result, so the monitor queues no check for it.
func LinkFingerprint(l netlink.Link) string {
	o, a := ObserveLink(l, nil), l.Attrs()
	return fmt.Sprintf("%s %s %s %d %s carrier=%t up=%t %s", o.Name, strings.Join(o.AltNames, ","), o.MAC, o.MTU, o.LinkLayer,
		o.Carrier, a.Flags&net.FlagUp != 0, a.ParentDev)
}

// rdmaLinkLayer is the link layer of the first RDMA port, lower-cased, or
// "" without RDMA: the HCA port is the authority when there is one.
func rdmaLinkLayer(devs []rdma.Device) string {
	for _, d := range devs {
		for _, p := range d.Ports {
			return strings.ToLower(p.LinkLayer)
		}
	}
	return ""
}

// PortProblem explains why the VF's port cannot pass traffic, or "" when
// it can: every RDMA port ACTIVE/LinkUp, or carrier on a plain netdev VF.
func (o *Observation) PortProblem() string {
	if len(o.RDMA) == 0 {
		if !o.Carrier {
			return fmt.Sprintf("%s has no carrier", o.Name)
		}
		return ""
	}
	for _, d := range o.RDMA {
		for _, p := range d.Ports {
			if !p.Active() {
				return fmt.Sprintf("%s port %d is %s / %s, want 4: ACTIVE / 5: LinkUp", d.Name, p.Num, p.State, p.PhysState)
			}
		}
	}
	return ""
}

// NodeGUID is the node GUID of the first RDMA device, or "".
func (o *Observation) NodeGUID() string {
	if len(o.RDMA) == 0 {
		return ""
	}
	return o.RDMA[0].NodeGUID.String()
}

// Compare lists every difference between exp and obs, in Reasons order.
func Compare(exp Expect, obs *Observation) []Finding {
	if !obs.Found {
		return []Finding{{Reason: Missing, Detail: fmt.Sprintf("VF %s is not in netns %s (it holds: %s)",
			exp.PCI, exp.Netns, strings.Join(obs.Present, ", "))}}
	}
	var out []Finding
	add := func(r Reason, format string, a ...any) {
		out = append(out, Finding{Reason: r, Detail: fmt.Sprintf(format, a...)})
	}
	if obs.Name != exp.IfName {
		add(Renamed, "VF %s is named %s, expected %s", exp.PCI, obs.Name, exp.IfName)
	}
	if exp.AltName != "" && !slices.Contains(obs.AltNames, exp.AltName) {
		add(AltNameMissing, "VF %s lacks altname %s (has: %s)", exp.PCI, exp.AltName, strings.Join(obs.AltNames, ", "))
	}
	if exp.MAC != "" && !strings.EqualFold(exp.MAC, obs.MAC) {
		add(MAC, "VF %s MAC is %s, expected %s", exp.PCI, obs.MAC, exp.MAC)
	}
	missing := (exp.RDMA || exp.NodeGUID != "") && len(obs.RDMA) == 0
	if missing {
		add(RDMAMissing, "VF %s: its RDMA device is found nowhere (looked in: %s)", exp.PCI, strings.Join(obs.RDMALooked, "; "))
	}
	if g := obs.NodeGUID(); exp.NodeGUID != "" && !missing && g != exp.NodeGUID {
		add(GUID, "VF %s node GUID is %s, expected %s", exp.PCI, g, exp.NodeGUID)
	}
	if exp.MTU != 0 && obs.MTU != exp.MTU {
		add(MTU, "VF %s MTU is %d, expected %d", exp.PCI, obs.MTU, exp.MTU)
	}
	if exp.LinkLayer != "" && obs.LinkLayer != exp.LinkLayer {
		add(LinkLayer, "VF %s link layer is %s, expected %s", exp.PCI, obs.LinkLayer, exp.LinkLayer)
	}
	if exp.PortPolicy != config.PolicyIgnore {
		if p := obs.PortProblem(); p != "" {
			add(PortDown, "VF %s: %s", exp.PCI, p)
			out[len(out)-1].Warn = exp.PortPolicy == config.PolicyWarn
		}
	}
	return out
}
