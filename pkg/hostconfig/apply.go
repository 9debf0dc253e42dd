package hostconfig

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// ApplyOptions says where Apply works and how long it may wait.
type ApplyOptions struct {
	// SysfsRoot is the node's sysfs ("/sys"). Apply writes nothing outside
	// it, followed links included.
	SysfsRoot string
	// Wait bounds each wait: for the PFs and their drivers, the VFs, their
	// drivers and netdevs. 0 means the spec's waitSeconds.
	Wait time.Duration
	// Netlink lets Apply rename netdevs, add altnames and set VF GUIDs, and
	// check altnames afterwards. Set it only when SysfsRoot is this network
	// namespace's sysfs (/sys on the host): the netdev names sysfs lists
	// are then this namespace's links. Without it those steps are reported
	// as problems where something needs changing.
	Netlink bool
	// Udev waits for udev's queue (udevadm settle) after creating and after
	// binding VFs, so the .link files apply first and Apply names only what
	// udev did not. It does nothing where udev does not run.
	Udev bool
	// Log gets a line for every change and every problem; nil discards.
	Log *slog.Logger
}

// ApplyResult is what Apply changed, what it could not do, and how the
// node compares with the spec afterwards.
type ApplyResult struct {
	// Changes lists every change in order ("PF 0000:18:00.0: created 8
	// VFs"); a second run on a node that matches has none.
	Changes []string
	// Problems lists what Apply could not do or refused, each with what to
	// do about it.
	Problems []string
	// Findings is the Checker's report on the node after the changes.
	Findings []Finding
}

// OK reports a run without problems after which the node matches the spec.
func (r *ApplyResult) OK() bool { return len(r.Problems) == 0 && !HasErrors(r.Findings) }

// pollInterval is how often a bounded wait looks again.
const pollInterval = 100 * time.Millisecond

// Apply brings the node to the spec, what the boot unit does before kubelet
// starts: it waits for the PFs (and, on InfiniBand, their RDMA devices),
// creates the VFs through sriov_numvfs (through 0 when a PF has another
// count), waits for them, gives every InfiniBand VF the node and port GUID
// derived from its PF's GUID (through the PF with netlink, then binding the
// VF so the driver takes them), names VFs and PFs and adds their altnames
// where udev has not, and finally runs the Checker. Each step changes only
// what differs, so a second run changes nothing. Per-PF trouble is a
// problem in the result and the other PFs go on; the error is for a spec
// that does not resolve, an unreadable sysfs root or a cancelled ctx.
func Apply(ctx context.Context, spec *Spec, opts ApplyOptions) (*ApplyResult, error) {
	a, err := newApplier(spec, opts)
	if err != nil {
		return nil, err
	}
	defer a.close()
	a.waitForPFs(ctx, spec)
	plan, err := resolve(spec, a.n.root)
	if err != nil {
		return nil, err
	}
	for _, pf := range plan.PFs {
		a.pfs = append(a.pfs, &pfRun{PFPlan: pf})
	}
	// Autoprobe turned off for creation is turned back on however Apply ends.
	defer a.restoreAutoprobe()
	steps := []func(context.Context){
		a.forEachPF(a.inspect),
		a.forEachPF(a.createVFs),
		a.waitForVFs,
		a.settleUdev,
		a.forEachPF(a.setGUIDs),
		a.bindVFs,
		a.settleUdev,
		a.waitForNetdevs,
		a.forEachPF(a.nameLinks),
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return a.res, fmt.Errorf("apply interrupted: %w", err)
		}
		step(ctx)
	}
	c := Checker{SysfsRoot: opts.SysfsRoot}
	if opts.Netlink {
		c.AltNames = a.altNames
	}
	if a.res.Findings, err = c.Check(spec); err != nil {
		return a.res, err
	}
	return a.res, nil
}

type applier struct {
	n        node
	realRoot string // the sysfs root with its links resolved: writes land under it
	wait     time.Duration
	opts     ApplyOptions
	log      *slog.Logger
	res      *ApplyResult
	pfs      []*pfRun
	nl       *vfnet.Handle // opened on first use
	nlErr    error
	rebind   []string // bound VFs given new GUIDs: unbind, then probe
	probe    []string // VFs to bind
}

// pfRun is one PF of the plan and what this run learnt about it.
type pfRun struct {
	PFPlan
	skip         bool // a problem was reported; later steps leave the PF alone
	guids        bool // its VFs get derived GUIDs
	pfGUID       sysfs.GUID
	autoprobeOff bool // this run turned sriov_drivers_autoprobe off
}

func newApplier(spec *Spec, opts ApplyOptions) (*applier, error) {
	if opts.SysfsRoot == "" {
		return nil, errors.New("no sysfs root to apply the spec to")
	}
	real, err := filepath.EvalSymlinks(opts.SysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("sysfs root %s: %w", opts.SysfsRoot, err)
	}
	n := node{root: opts.SysfsRoot}
	if _, err := os.ReadDir(n.dev("")); err != nil {
		return nil, fmt.Errorf("sysfs root %s is not readable: %w", opts.SysfsRoot, err)
	}
	wait := opts.Wait
	if wait <= 0 {
		wait = time.Duration(spec.WaitSeconds) * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &applier{n: n, realRoot: real, wait: wait, opts: opts, log: log, res: &ApplyResult{}}, nil
}

func (a *applier) close() {
	if a.nl != nil {
		a.nl.Close()
	}
}

// changed records and logs one change.
func (a *applier) changed(subject, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	a.res.Changes = append(a.res.Changes, subject+": "+what)
	a.log.Info(what, "subject", subject)
}

// problem records and logs what could not be done.
func (a *applier) problem(subject, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	a.res.Problems = append(a.res.Problems, subject+": "+what)
	a.log.Error(what, "subject", subject)
}

// forEachPF makes a step of fn, run for every PF no problem took out.
func (a *applier) forEachPF(fn func(ctx context.Context, pf *pfRun)) func(context.Context) {
	return func(ctx context.Context) {
		for _, pf := range a.pfs {
			if !pf.skip {
				fn(ctx, pf)
			}
		}
	}
}

// waitFor polls done until it holds, the wait bound passes or ctx ends,
// and reports whether it held.
func (a *applier) waitFor(ctx context.Context, done func() bool) bool {
	if done() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return done()
		case <-tick.C:
			if done() {
				return true
			}
		}
	}
}

// link returns the NETLINK_ROUTE handle of the caller's network namespace,
// opening it on first use.
func (a *applier) link() (*vfnet.Handle, error) {
	if a.nl == nil && a.nlErr == nil {
		a.nl, a.nlErr = vfnet.OpenHere()
	}
	return a.nl, a.nlErr
}

// altNames is the Checker's AltNames through the applier's handle.
func (a *applier) altNames(ifname string) ([]string, error) {
	h, err := a.link()
	if err != nil {
		return nil, err
	}
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("no link %s in this network namespace", ifname)
	}
	return l.Attrs().AltNames, nil
}

// writeAttr writes value to the sysfs attribute at path. The directory it
// is in, once every link on the way is followed (bus/pci/devices/<pci> and
// driver are links), must lie under the sysfs root, and the attribute must
// be a regular file there (not a link, FIFO or device): otherwise nothing
// is written. It never creates a file.
// Equivalent to: echo $value > $path
func (a *applier) writeAttr(path, value string) error {
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if dir != a.realRoot && !strings.HasPrefix(dir, a.realRoot+string(filepath.Separator)) {
		return fmt.Errorf("write %s: refused, it leads to %s, outside the sysfs root %s", path, dir, a.opts.SysfsRoot)
	}
	f, err := safefile.OpenFile(filepath.Join(dir, filepath.Base(path)), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", value, path, err)
	}
	return nil
}

// --- 1. PFs ---------------------------------------------------------------

// waitForPFs waits until every PF the spec lists by address has
// sriov_numvfs (and, on InfiniBand, an RDMA device) and every match rule
// finds a PF. It goes on when the wait runs out: inspect reports each PF.
func (a *applier) waitForPFs(ctx context.Context, spec *Spec) {
	ready := func() bool {
		for _, e := range spec.PFs {
			lt := spec.LinkType
			if e.LinkType != "" {
				lt = e.LinkType
			}
			if e.Match != nil {
				if found, err := a.n.matchPFs(*e.Match); err != nil || len(found) == 0 {
					return false
				}
				continue
			}
			if !a.pfReady(e.PCI, lt) {
				return false
			}
		}
		return true
	}
	if !a.waitFor(ctx, ready) {
		a.log.Warn("not every PF is ready; going on", "waited", a.wait)
	}
}

func (a *applier) pfReady(pci string, lt LinkType) bool {
	if _, err := os.Stat(a.n.dev(pci, "sriov_numvfs")); err != nil {
		return false
	}
	return lt != LinkInfiniBand || a.n.rdma(pci) != ""
}

// inspect checks that the PF is there, SR-IOV capable and runs the wanted
// link layer, and whether its GUID can seed its VFs' GUIDs.
func (a *applier) inspect(_ context.Context, pf *pfRun) {
	subj := "PF " + pf.PCI
	if pf.Problem != nil {
		a.problem(subj, "%v", pf.problem())
		pf.skip = true
		return
	}
	if !a.n.exists(pf.PCI) {
		a.problem(subj, "no such PCI device under %s after %s: is the card present (lspci -s %s) and its driver loaded?",
			a.n.dev(""), a.wait, pf.PCI)
		pf.skip = true
		return
	}
	if _, err := os.Stat(a.n.dev(pf.PCI, "sriov_numvfs")); err != nil {
		a.problem(subj, "not SR-IOV capable (no sriov_numvfs): enable SR-IOV in the BIOS and the NIC firmware (mlxconfig -d %s set SRIOV_EN=1 NUM_OF_VFS=%d)",
			pf.PCI, pf.NumVFs)
		pf.skip = true
		return
	}
	found, err := a.n.linkLayer(pf.PCI)
	switch {
	case err != nil:
		a.problem(subj, "%v", err)
		return
	case pf.LinkType == LinkInfiniBand && a.n.rdma(pf.PCI) == "":
		a.problem(subj, "no RDMA device after %s: load mlx5_ib (modprobe mlx5_ib)", a.wait)
		return
	case pf.LinkType != LinkAuto && found != pf.LinkType:
		a.problem(subj, "port 1 runs %s, the spec wants %s: %s", found, pf.LinkType, linkTypeRemedy(pf.PCI, pf.LinkType))
	}
	if pf.GUIDs != GUIDPFDerived || found != LinkInfiniBand {
		return
	}
	g, err := a.n.pfGUID(pf.PCI)
	if err == nil {
		err = CheckPFGUID(g)
	}
	if err != nil {
		a.problem(subj, "%v; its VFs get no GUIDs: set guids: none in the spec and assign them another way (subnet manager, ib-kubernetes)", err)
		return
	}
	pf.guids, pf.pfGUID = true, g
}

// --- 2. VFs ---------------------------------------------------------------

// createVFs makes sriov_numvfs the planned count. The kernel refuses to
// change a count other than 0 (EBUSY), so a PF with other VFs goes through
// 0 first. A PF whose VFs get GUIDs creates them with autoprobe off, so the
// GUIDs are set before the driver first binds them and no rebind is needed.
func (a *applier) createVFs(ctx context.Context, pf *pfRun) {
	subj := "PF " + pf.PCI
	numvfs := a.n.dev(pf.PCI, "sriov_numvfs")
	cur, err := readInt(numvfs)
	if err != nil {
		a.problem(subj, "%v", err)
		pf.skip = true
		return
	}
	if cur == pf.NumVFs {
		return
	}
	if total, err := readInt(a.n.dev(pf.PCI, "sriov_totalvfs")); err != nil || total < pf.NumVFs {
		a.problem(subj, "supports %d VFs (sriov_totalvfs; %v), the spec wants %d: raise it in the firmware (mlxconfig -d %s set NUM_OF_VFS=%d) and reboot",
			total, err, pf.NumVFs, pf.PCI, pf.NumVFs)
		pf.skip = true
		return
	}
	if cur != 0 {
		if err := a.writeAttr(numvfs, "0"); err != nil {
			a.problem(subj, "removing its %d VFs failed (VFs in use? see dmesg): %v", cur, err)
			pf.skip = true
			return
		}
		a.changed(subj, "removed its %d VFs (the spec wants %d)", cur, pf.NumVFs)
		gone := func() bool {
			left, err := filepath.Glob(a.n.dev(pf.PCI, "virtfn*"))
			return err == nil && len(left) == 0
		}
		if !a.waitFor(ctx, gone) {
			a.problem(subj, "its VFs were still there %s after writing 0 to %s (see dmesg)", a.wait, numvfs)
			pf.skip = true
			return
		}
	}
	if pf.guids {
		autoprobe := a.n.dev(pf.PCI, "sriov_drivers_autoprobe")
		if v, err := sysfs.ReadAttr(autoprobe); err == nil && v == "1" {
			if err := a.writeAttr(autoprobe, "0"); err != nil {
				a.problem(subj, "%v; its VFs bind before their GUIDs are set and are bound again after", err)
			} else {
				pf.autoprobeOff = true
				a.changed(subj, "turned sriov_drivers_autoprobe off while its VFs are created")
			}
		}
	}
	if err := a.writeAttr(numvfs, strconv.Itoa(pf.NumVFs)); err != nil {
		a.problem(subj, "creating %d VFs failed (see dmesg): %v", pf.NumVFs, err)
		pf.skip = true
		return
	}
	a.changed(subj, "created %d VFs", pf.NumVFs)
}

// waitForVFs waits for every planned VF's virtfnN link, then checks that
// each points at the address the .link files name.
func (a *applier) waitForVFs(ctx context.Context) {
	present := func() bool {
		for _, pf := range a.pfs {
			for _, vf := range pf.VFs {
				if !pf.skip && a.n.virtfn(pf.PCI, vf.Index) == "" {
					return false
				}
			}
		}
		return true
	}
	a.waitFor(ctx, present)
	for _, pf := range a.pfs {
		if pf.skip {
			continue
		}
		for _, vf := range pf.VFs {
			switch got := a.n.virtfn(pf.PCI, vf.Index); {
			case got == "":
				a.problem("PF "+pf.PCI, "VF %d (%s) did not appear within %s of creating the VFs (see dmesg)", vf.Index, vf.PCI, a.wait)
				pf.skip = true
			case got != vf.PCI:
				a.problem("PF "+pf.PCI, "VF %d is %s, the generated files expect %s: this node's layout differs; regenerate the files on it (hostconfig --sysfs-root /sys)",
					vf.Index, got, vf.PCI)
				pf.skip = true
			}
		}
	}
}

// settleUdev waits for udev to handle the events so far (the .link files
// name VFs as they appear), at most the wait bound.
// Equivalent to: udevadm settle --timeout=$wait
func (a *applier) settleUdev(ctx context.Context) {
	if !a.opts.Udev {
		return
	}
	if _, err := os.Stat("/run/udev/control"); err != nil {
		return // udev does not run
	}
	udevadm, err := exec.LookPath("udevadm")
	if err != nil {
		return
	}
	secs := max(1, int(a.wait/time.Second))
	if out, err := exec.CommandContext(ctx, udevadm, "settle", "--timeout="+strconv.Itoa(secs)).CombinedOutput(); err != nil {
		a.log.Warn("udev did not settle; going on", "waited", a.wait, "err", err, "output", strings.TrimSpace(string(out)))
	}
}

// --- 3. GUIDs -------------------------------------------------------------

// setGUIDs gives each VF of an InfiniBand PF the derived node and port GUID
// where it does not report them already. mlx5 applies a VF's GUIDs when its
// driver binds, so a bound VF is unbound and bound again after, an unbound
// one bound. A bound VF without an RDMA device on the host is in a pod: it
// is left alone.
func (a *applier) setGUIDs(_ context.Context, pf *pfRun) {
	if !pf.guids {
		return
	}
	pfIndex := -1
	for _, vf := range pf.VFs {
		subj := "VF " + vf.PCI
		want, err := DeriveVFGUIDs(pf.pfGUID, vf.Index)
		if err != nil {
			a.problem(subj, "%v", err)
			continue
		}
		bound := a.n.driver(vf.PCI) != ""
		if bound {
			dir := a.n.rdma(vf.PCI)
			if dir == "" {
				a.log.Info("bound, but no RDMA device on the host (in a pod?): its GUIDs are left alone", "subject", subj)
				continue
			}
			if hasGUIDs(dir, want) {
				continue
			}
		}
		if !a.opts.Netlink {
			a.problem(subj, "node GUID %s and port GUID %s not set: netlink steps are off (the sysfs root %s is not this network namespace's /sys)",
				want.Node.Colon(), want.Port.Colon(), a.opts.SysfsRoot)
			continue
		}
		if pfIndex < 0 {
			if pfIndex, err = a.netdevIndex(pf.PCI); err != nil {
				a.problem("PF "+pf.PCI, "%v: cannot set its VFs' GUIDs", err)
				return
			}
		}
		h, err := a.link()
		if err != nil {
			a.problem(subj, "%v", err)
			return
		}
		if err := h.SetVFGUIDs(pfIndex, vf.Index, guidAddr(want.Node), guidAddr(want.Port)); err != nil {
			a.problem(subj, "%v", err)
			continue
		}
		a.changed(subj, "set node GUID %s and port GUID %s through PF %s (VF %d)", want.Node.Colon(), want.Port.Colon(), pf.PCI, vf.Index)
		if bound {
			a.rebind = append(a.rebind, vf.PCI)
		} else {
			a.probe = append(a.probe, vf.PCI)
		}
	}
}

// hasGUIDs reports whether the RDMA device dir already has the wanted
// GUIDs; a port GUID not reported yet (GID 0 unreadable or zero) counts as
// right, as the Checker counts it.
func hasGUIDs(dir string, want VFGUIDs) bool {
	node, err := nodeGUID(dir)
	if err != nil || node != want.Node {
		return false
	}
	port, err := portGUID(dir)
	return err != nil || port == sysfs.GUIDZero || port == want.Port
}

// guidAddr is a GUID as the 8 bytes netlink takes, most significant first.
func guidAddr(g sysfs.GUID) net.HardwareAddr {
	return binary.BigEndian.AppendUint64(nil, uint64(g))
}

// netdevIndex is the ifindex of a PCI function's host netdev, from sysfs.
func (a *applier) netdevIndex(pci string) (int, error) {
	devs := a.n.netdevs(pci)
	if len(devs) == 0 {
		return 0, fmt.Errorf("no netdev on the host (load ib_ipoib: modprobe ib_ipoib)")
	}
	return readInt(a.n.dev(pci, "net", devs[0], "ifindex"))
}

// bindVFs unbinds the VFs whose GUIDs changed while bound, turns autoprobe
// back on, and binds every VF that needs it, waiting for their drivers and
// RDMA devices.
func (a *applier) bindVFs(ctx context.Context) {
	var unbound []string
	for _, vf := range a.rebind {
		if err := a.writeAttr(a.n.dev(vf, "driver", "unbind"), vf); err != nil {
			a.problem("VF "+vf, "unbind failed (see dmesg): %v", err)
			continue
		}
		a.changed("VF "+vf, "unbound, to bind again with its new GUIDs")
		unbound = append(unbound, vf)
	}
	if len(unbound) > 0 && !a.waitFor(ctx, func() bool { return a.allBound(unbound, false) }) {
		a.problem("node", "VFs still bound %s after unbind: %s", a.wait, strings.Join(unbound, ", "))
	}
	a.probe = append(a.probe, unbound...)
	a.restoreAutoprobe()
	var probed []string
	for _, vf := range a.probe {
		if err := a.writeAttr(filepath.Join(a.n.root, "bus", "pci", "drivers_probe"), vf); err != nil {
			a.problem("VF "+vf, "probing its driver failed (see dmesg): %v", err)
			continue
		}
		a.changed("VF "+vf, "bound its driver")
		probed = append(probed, vf)
	}
	if len(probed) == 0 || a.waitFor(ctx, func() bool { return a.allBound(probed, true) }) {
		return
	}
	for _, vf := range probed {
		if a.n.driver(vf) == "" || a.n.rdma(vf) == "" {
			a.problem("VF "+vf, "no driver or RDMA device %s after binding (mlx5_ib loaded? see dmesg)", a.wait)
		}
	}
}

// allBound reports whether every VF is bound with an RDMA device (bound
// true) or has no driver (bound false).
func (a *applier) allBound(vfs []string, bound bool) bool {
	for _, vf := range vfs {
		has := a.n.driver(vf) != ""
		if bound && (!has || a.n.rdma(vf) == "") || !bound && has {
			return false
		}
	}
	return true
}

// restoreAutoprobe turns autoprobe back on where this run turned it off and
// queues the PF's VFs that are still unbound for binding.
func (a *applier) restoreAutoprobe() {
	for _, pf := range a.pfs {
		if !pf.autoprobeOff {
			continue
		}
		pf.autoprobeOff = false
		subj := "PF " + pf.PCI
		if err := a.writeAttr(a.n.dev(pf.PCI, "sriov_drivers_autoprobe"), "1"); err != nil {
			a.problem(subj, "cannot turn sriov_drivers_autoprobe back on: %v", err)
		} else {
			a.changed(subj, "turned sriov_drivers_autoprobe back on")
		}
		vfs, err := sysfs.Reader{Root: a.n.root}.VFs(pf.PCI)
		if err != nil {
			a.problem(subj, "%v", err)
			continue
		}
		for _, vf := range vfs {
			if a.n.driver(vf) == "" && !slices.Contains(a.probe, vf) {
				a.probe = append(a.probe, vf)
			}
		}
	}
}

// --- 4. Names -------------------------------------------------------------

// waitForNetdevs waits until every bound VF that gets a host netdev
// (Ethernet, or InfiniBand with ib_ipoib loaded) has one.
func (a *applier) waitForNetdevs(ctx context.Context) {
	missing := func() []string {
		var out []string
		for _, pf := range a.pfs {
			for _, vf := range pf.VFs {
				if !pf.skip && a.wantsNetdev(vf.PCI) && len(a.n.netdevs(vf.PCI)) == 0 {
					out = append(out, vf.PCI)
				}
			}
		}
		return out
	}
	if !a.waitFor(ctx, func() bool { return len(missing()) == 0 }) {
		a.log.Warn("VF netdevs did not appear; their names are not applied", "waited", a.wait, "vfs", strings.Join(missing(), ", "))
	}
}

// wantsNetdev reports a bound function that gets a host netdev: IPoIB
// netdevs exist only with ib_ipoib loaded.
func (a *applier) wantsNetdev(pci string) bool {
	if a.n.driver(pci) == "" {
		return false
	}
	if ll, err := a.n.linkLayer(pci); err == nil && ll == LinkEthernet {
		return true
	}
	_, err := os.Stat(filepath.Join(a.n.root, "module", "ib_ipoib"))
	return err == nil
}

// nameLinks applies the PF's and its VFs' names and altnames.
func (a *applier) nameLinks(_ context.Context, pf *pfRun) {
	a.nameLink("PF "+pf.PCI, pf.PCI, pf.Name, pf.AltName)
	for _, vf := range pf.VFs {
		a.nameLink("VF "+vf.PCI, vf.PCI, vf.Name, vf.AltName)
	}
}

// nameLink gives the host netdev of PCI function pci the name want and the
// altname alt ("" for either: leave it), when it does not carry them yet.
// A rename takes an up link down and back up (the kernel renames only
// links that are down). A name or altname another link holds is a problem,
// never taken from it.
// Equivalent to: ip link set dev $cur down; ip link set dev $cur name $want;
// ip link set dev $want up; ip link property add dev $want altname $alt
func (a *applier) nameLink(subj, pci, want, alt string) {
	devs := a.n.netdevs(pci)
	if len(devs) == 0 || want == "" && alt == "" {
		return // in a pod, not bound, or nothing to apply
	}
	cur := devs[0]
	if !a.opts.Netlink {
		if want != "" && cur != want {
			a.problem(subj, "%s not renamed to %s: netlink steps are off (the sysfs root %s is not this network namespace's /sys)", cur, want, a.opts.SysfsRoot)
		}
		return
	}
	h, err := a.link()
	if err != nil {
		a.problem(subj, "%v", err)
		return
	}
	l, err := h.LinkByName(cur)
	switch {
	case err != nil:
		a.problem(subj, "%v", err)
		return
	case l == nil:
		a.problem(subj, "sysfs lists netdev %s but this network namespace has no such link: run in the host's", cur)
		return
	}
	if want != "" && cur != want {
		switch other, err := h.LinkByName(want); {
		case err != nil:
			a.problem(subj, "%v", err)
			return
		case other != nil && other.Attrs().Index == l.Attrs().Index:
			a.problem(subj, "cannot rename %s to %s, its own altname: ip link property del dev %s altname %s", cur, want, cur, want)
			return
		case other != nil:
			a.problem(subj, "cannot rename %s to %s: %s has that name or altname", cur, want, other.Attrs().Name)
			return
		}
		if err := h.Rename(l, want); err != nil {
			a.problem(subj, "%v", err)
			return
		}
		a.changed(subj, "renamed %s to %s", cur, want)
		if l, err = h.Refresh(l); err != nil {
			a.problem(subj, "%v", err)
			return
		}
	}
	if alt == "" || slices.Contains(l.Attrs().AltNames, alt) {
		return
	}
	switch holder, err := h.LinkByName(alt); {
	case err != nil:
		a.problem(subj, "%v", err)
		return
	case holder != nil:
		a.problem(subj, "altname %s is held by %s, not %s", alt, holder.Attrs().Name, l.Attrs().Name)
		return
	}
	if err := h.AddAltName(l, alt); err != nil {
		a.problem(subj, "%v", err)
		return
	}
	a.changed(subj, "added altname %s to %s", alt, l.Attrs().Name)
}
