// Package portwatch is the agent's free-VF health source: it watches the
// RDMA ports the host sees (every PF's, and every VF's whose device is in
// the host's netns: the free ones, and in shared mode the attached ones
// too) for a change of state, link layer or node GUID, which the kernel
// announces to no one, and the host's links for a change of admin state or
// carrier, which it does announce (RTM_NEWLINK). It re-reads the port
// attributes every interval through files it keeps open, hears the links'
// netlink events as they come, and on a change runs the doctor's port
// checks (doctor.Ports) and hands on their findings, so a free VF whose
// port goes down or whose carrier drops is known to the node condition and
// its device taint in about a second rather than at the next doctor run.
package portwatch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// DefaultInterval is how often the port attributes are read.
const DefaultInterval = time.Second

// Config says what to watch and whom to tell.
type Config struct {
	// Doctor is what the port checks expect (the doctor's options: the
	// sysfs root and the link layer).
	Doctor doctor.Options
	// Interval between two reads of every port attribute; zero means
	// DefaultInterval.
	Interval time.Duration
	// Changed hears each port report whose findings differ from the last
	// one handed on (the first is always handed on). It is called from the
	// watcher's goroutine and must not block.
	Changed func(*doctor.PortReport)
	// LinkEvents: hear the netlink link events of the network namespace
	// Run runs in (the doctor's port checks judge the carrier of its
	// links) and run the checks at once on a change of a link's admin
	// state or carrier, a link added or a link gone.
	LinkEvents bool
	Logger     *slog.Logger
}

// device is one class/infiniband entry's open attribute files.
type device struct {
	entry sysfs.RDMAEntry
	files []*os.File
}

// Watcher is one watch of a node's RDMA ports. Its state is its
// goroutine's alone.
type Watcher struct {
	cfg  Config
	sys  sysfs.Reader
	log  *slog.Logger
	devs map[string]*device
	last []byte // every device's values, as read last
	buf  []byte
	sent *doctor.PortReport
	// failed is the error of the last port check that failed, logged once.
	failed string
	// flags are the IFF_UP and IFF_LOWER_UP bits of every link an event
	// was heard about, by index.
	flags map[int32]uint32
}

// New returns a watcher; nothing runs until Run.
func New(cfg Config) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	root := cfg.Doctor.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	return &Watcher{cfg: cfg, sys: sysfs.Reader{Root: root}, log: cfg.Logger, devs: map[string]*device{}, buf: make([]byte, 64),
		flags: map[int32]uint32{}}
}

// Run reads the ports every interval, and with LinkEvents hears the link
// events between reads, until ctx ends; then it closes its files and its
// netlink socket. The first read always runs the checks.
func (w *Watcher) Run(ctx context.Context) {
	defer w.close()
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	var links <-chan netlink.LinkUpdate
	for {
		if w.cfg.LinkEvents && links == nil {
			links = w.subscribe(ctx) // nil when it fails: tried again next interval
		}
		if w.Poll() {
			w.Check()
		}
		if !w.hearLinks(ctx, t.C, &links) {
			return
		}
	}
}

// subscribe opens a netlink socket on RTMGRP_LINK in the calling thread's
// network namespace; it closes when ctx ends.
func (w *Watcher) subscribe(ctx context.Context) <-chan netlink.LinkUpdate {
	ch := make(chan netlink.LinkUpdate, 64)
	err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { w.log.Debug("link events", "err", err) },
	})
	if err != nil {
		w.log.Warn("cannot hear link events; carrier changes are known at the next doctor run", "err", err)
		return nil
	}
	return ch
}

// hearLinks runs the checks on each burst of link events that changes a
// link's admin state or carrier, until the next tick; false when ctx ended.
// A subscription that ended (the socket overran and events were lost) is
// dropped, and the checks run: the next interval opens another.
func (w *Watcher) hearLinks(ctx context.Context, tick <-chan time.Time, links *<-chan netlink.LinkUpdate) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case u, ok := <-*links:
			if !ok {
				*links = nil
				clear(w.flags)
				w.Check()
				continue
			}
			changed := w.linkChanged(u)
			for len(*links) > 0 { // a burst is one check; a close is heard next round
				changed = w.linkChanged(<-*links) || changed
			}
			if changed {
				w.Check()
			}
		}
	}
}

// linkChanged records a link event and reports whether it removed a link
// (moved to a pod's netns, say), was the first heard about one, or changed
// one's admin state or carrier. Other changes (an address, an MTU, stats)
// are not the checks' business.
func (w *Watcher) linkChanged(u netlink.LinkUpdate) bool {
	if u.Header.Type == unix.RTM_DELLINK {
		delete(w.flags, u.Index)
		return true
	}
	f := u.Flags & (unix.IFF_UP | unix.IFF_LOWER_UP)
	old, known := w.flags[u.Index]
	w.flags[u.Index] = f
	return !known || old != f
}

// Poll lists class/infiniband, opens the files of devices that are new (or
// came back: a new inode), closes those of devices gone, and reads every
// file; it reports whether anything differs from the last poll (the first
// poll always does).
func (w *Watcher) Poll() bool {
	entries, err := w.sys.ListRDMA()
	if err != nil {
		w.log.Debug("cannot list RDMA devices", "err", err)
	}
	seen := make(map[string]bool, len(entries))
	var now []byte
	for _, e := range entries {
		seen[e.Name] = true
		d := w.devs[e.Name]
		if d == nil || d.entry != e {
			if d != nil {
				closeAll(d.files)
			}
			d = &device{entry: e, files: sysfs.OpenPolled(w.sys.RDMAPath(e.Name))}
			w.devs[e.Name] = d
		}
		vals, _ := sysfs.ReadPolled(d.files, w.buf)
		now = append(append(append(now, e.Name...), 0), vals...)
	}
	for name, d := range w.devs {
		if !seen[name] {
			closeAll(d.files)
			delete(w.devs, name)
		}
	}
	changed := w.last == nil || !bytes.Equal(now, w.last)
	if now == nil {
		now = []byte{} // read once: the next poll compares
	}
	w.last = now
	return changed
}

// Check runs the port checks and hands their report on when its findings
// changed.
func (w *Watcher) Check() {
	rep, err := doctor.Ports(w.cfg.Doctor)
	if err != nil {
		if err.Error() != w.failed {
			w.log.Warn("cannot run the port checks; free VFs' ports are known at the next doctor run", "err", err)
		}
		w.failed = err.Error()
		return
	}
	w.failed = ""
	if w.sent != nil && slices.EqualFunc(w.sent.Findings, rep.Findings, finding.Finding.Equal) && slices.Equal(w.sent.Functions, rep.Functions) {
		return
	}
	w.sent = rep
	w.log.Debug("port checks changed", "functions", len(rep.Functions), "errors", countErrors(rep.Findings))
	if w.cfg.Changed != nil {
		w.cfg.Changed(rep)
	}
}

func countErrors(fs []finding.Finding) int {
	n := 0
	for _, f := range fs {
		if f.Severity == finding.Error {
			n++
		}
	}
	return n
}

func (w *Watcher) close() {
	for name, d := range w.devs {
		closeAll(d.files)
		delete(w.devs, name)
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
