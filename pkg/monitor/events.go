package monitor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/drift"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/status"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/vfnet"
)

// startEvents brings up the event-driven checks: the poller and the state
// directory watch. Attachments already known are subscribed to by the
// first sweep's reconcile, which comes after, as do those of records
// appearing later.
func (m *Monitor) startEvents(ctx context.Context, wg *sync.WaitGroup) {
	m.mu.Lock()
	m.eventsOn = true
	m.mu.Unlock()
	wg.Go(func() { m.poll(ctx) })
	dirs, err := m.store.WatchRecords()
	if err != nil {
		m.log.Warn("cannot watch the state directory; new and deleted records are seen by the sweep", "stateDir", m.cfg.StateDir, "err", err)
		return
	}
	m.dirs = dirs
	wg.Go(func() { m.watchRecords(ctx, dirs) })
}

// stopEvents closes every link subscription and waits until their sockets
// are closed. Run calls it once nothing can open one any more.
func (m *Monitor) stopEvents() {
	m.mu.Lock()
	m.eventsOn = false
	var subs []*subscription
	for _, a := range m.atts {
		if a.sub != nil {
			subs = append(subs, a.sub)
			a.sub = nil
		}
		a.pathID = vfnet.NetnsID{}
		a.ports.close()
		a.ports = nil
	}
	m.mu.Unlock()
	for _, s := range subs {
		s.close()
		<-s.ended
	}
	// Subscriptions being opened close their sockets themselves once they
	// see events are off; one blocked in a read is left behind.
	done := make(chan struct{})
	go func() {
		m.subscribers.Wait()
		close(done)
	}()
	t := time.NewTimer(m.cfg.CheckTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		m.log.Warn("a link watch is still being opened (a read that does not return); stopping without it")
	}
	if m.dirs != nil {
		m.dirs.Close()
	}
}

// subscription is one attachment's link watch in its pod netns.
type subscription struct {
	watch *vfnet.LinkWatch
	ended chan struct{} // closed once its socket is closed and its goroutine done
}

// close closes the socket; safe on nil and when repeated.
func (s *subscription) close() {
	if s != nil {
		s.watch.Close()
	}
}

// subscribeBounded runs subscribe on a goroutine of its own and waits for
// it at most the check timeout: subscribing reads the VF's port state (the
// poller's baseline) and enters the pod's netns, and a sysfs read of a
// wedged device can block in the kernel, where it cannot be cancelled. One
// still running is left behind: that attachment alone goes without events
// until it returns (its checks still run; /healthz names it), and it is
// not started again meanwhile. Call it without locks held.
func (m *Monitor) subscribeBounded(a *attachment) {
	m.mu.Lock()
	if !a.subscribing.IsZero() || !m.eventsOn {
		m.mu.Unlock()
		return
	}
	a.subscribing = time.Now()
	m.subscribers.Add(1) // under mu while events are on: stopEvents waits after turning them off
	m.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer m.subscribers.Done()
		defer close(done)
		m.subscribe(a)
		m.mu.Lock()
		a.subscribing = time.Time{}
		m.mu.Unlock()
	}()
	t := time.NewTimer(m.cfg.CheckTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		m.log.Warn("opening the attachment's link watch takes longer than the check timeout (a read that does not return); going on without it",
			attachmentAttrs(a.rec)...)
	}
}

// subscribe opens a link watch in the attachment's netns: each
// notification about the VF that changes what the monitor compares queues
// a check. When the socket fails, the watch ends and the next poll opens a
// new one. Without a netns at the path, nothing is opened; the poll tries
// again when the path changes.
func (m *Monitor) subscribe(a *attachment) {
	rec := a.rec
	key := rec.Key()
	m.mu.Lock()
	var ports *portPoll
	if a.ports == nil {
		// Read before the first check is queued: a change after this read
		// is seen by the poll, one before it by that check.
		ports = newPortPoll(m.sys, rec.PCI)
	}
	m.mu.Unlock()
	ports.baseline()
	s := &subscription{ended: make(chan struct{})}
	w, err := vfnet.WatchLinks(rec.Netns,
		func(u netlink.LinkUpdate) { m.linkUpdate(a, u) },
		func(err error) {
			// An answer that the VF's index is gone, or lost notifications.
			m.log.Debug("link watch", append(attachmentAttrs(rec), "err", err)...)
			if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOBUFS) {
				m.queueCheck(key, status.TriggerLink)
			}
		},
		func(err error) { m.subscriptionEnded(a, s, err) })
	var pathID vfnet.NetnsID
	if err != nil {
		pathID, _ = vfnet.NetnsIDOf(rec.Netns) // not again until the path changes
	}
	var old *subscription
	keep := false
	m.mu.Lock()
	if a.ports == nil && m.atts[key] == a && m.eventsOn {
		a.ports, ports = ports, nil
	}
	if err != nil {
		a.pathID = pathID
	} else {
		s.watch = w
		m.subs++
		if keep = m.eventsOn && m.atts[key] == a; keep {
			old, a.sub, a.pathID, a.lastLink = a.sub, s, w.ID(), ""
		}
	}
	m.mu.Unlock()
	ports.close() // not needed after all
	switch {
	case err != nil:
		m.log.Debug("no link watch", append(attachmentAttrs(rec), "err", err)...)
	case !keep:
		w.Close() // Run is ending, or the record went meanwhile
	default:
		old.close()
	}
}

// subscriptionEnded runs once a watch's socket is closed, on purpose
// (err nil) or because receiving failed: then the next poll reopens it.
func (m *Monitor) subscriptionEnded(a *attachment, s *subscription, err error) {
	m.mu.Lock()
	m.subs--
	if a.sub == s {
		a.sub, a.pathID = nil, vfnet.NetnsID{} // the next poll reopens it
	}
	current := m.atts[a.rec.Key()] == a
	m.mu.Unlock()
	close(s.ended)
	if err != nil && current {
		m.log.Info("link watch failed and will be reopened; checking the attachment, as changes may have been missed",
			append(attachmentAttrs(a.rec), "err", err)...)
		m.queueCheck(a.rec.Key(), status.TriggerLink)
	}
}

// linkUpdate queues a check for a notification (or an answer) that may be
// about the attachment's VF: its index, its PCI parent, its ifname or its
// altname (a link taking them matters too), unless it shows the VF as the
// last one did in everything a check compares. Before the VF's index is
// known, everything counts.
func (m *Monitor) linkUpdate(a *attachment, u netlink.LinkUpdate) {
	m.mu.Lock()
	rec, idx := a.rec, a.ifindex
	queue := true
	switch {
	case u.Link == nil || idx == 0:
	case int(u.Index) == idx:
		sum := linkSummary(u)
		queue = sum != a.lastLink
		a.lastLink = sum
	default:
		l := u.Attrs()
		queue = l.ParentDev == rec.PCI || l.Name == rec.IfName || (rec.AltName != "" && slices.Contains(l.AltNames, rec.AltName))
	}
	m.mu.Unlock()
	if queue {
		m.queueCheck(rec.Key(), status.TriggerLink)
	}
}

// linkSummary is what a check compares of the link a notification is
// about (drift.LinkFingerprint), and whether the link was added or deleted.
func linkSummary(u netlink.LinkUpdate) string {
	return fmt.Sprintf("%d %s", u.Header.Type, drift.LinkFingerprint(u.Link))
}

// poll looks, every poll interval, at what each attachment's netns path
// names (a pod sandbox torn down without DEL unmounts it: its subscription
// is closed, which lets the netns go, and the attachment checked) and, on
// a goroutine of its own since a sysfs read can hang, at the VFs' RDMA
// port state and link layer.
func (m *Monitor) poll(ctx context.Context) {
	t := time.NewTicker(m.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		atts := m.pollNetns()
		go m.pollPorts(atts)
	}
}

// pollNetns (re)opens or closes subscriptions as the netns paths say, and
// returns the attachments.
func (m *Monitor) pollNetns() []*attachment {
	m.mu.Lock()
	atts := make([]*attachment, 0, len(m.atts))
	for _, a := range m.atts {
		atts = append(atts, a)
	}
	m.mu.Unlock()
	for _, a := range atts {
		id, err := vfnet.NetnsIDOf(a.rec.Netns)
		m.mu.Lock()
		changed := id != a.pathID
		var closing *subscription
		if changed && a.sub != nil {
			closing, a.sub = a.sub, nil
		}
		a.pathID = id
		current := m.atts[a.rec.Key()] == a && m.eventsOn
		sub, idx := a.sub, a.ifindex
		m.mu.Unlock()
		closing.close()
		if !changed && current && sub != nil && idx != 0 && len(a.rec.RDMA) == 0 {
			// The carrier is the port state of a VF without RDMA
			// device, and its notifications wait for the kernel's
			// linkwatch, up to a second after the last link event
			// anywhere on the node; the answer comes at once (and shows
			// what a down link's altname change does not announce).
			_ = sub.watch.Ask(idx)
		}
		if !changed || !current {
			continue
		}
		if err == nil {
			m.subscribeBounded(a) // another netns at the path, or a lost subscription
		}
		m.queueCheck(a.rec.Key(), status.TriggerNetns)
	}
	return atts
}

// pollPorts reads the polled sysfs files of each attachment and queues a
// check for those whose values changed. An attachment whose read is still
// hanging from an earlier poll is skipped.
func (m *Monitor) pollPorts(atts []*attachment) {
	for _, a := range atts {
		m.mu.Lock()
		p, key := a.ports, a.rec.Key()
		m.mu.Unlock()
		if p != nil && p.changed() {
			m.queueCheck(key, status.TriggerSysfs)
		}
	}
}

// portPoll is what the poller reads of one VF: for each of its RDMA
// devices the node GUID and, for each port, the logical state and the link
// layer. phys_state is left out: a port whose physical link drops leaves
// ACTIVE too, and the check that follows reads everything. On mlx5 a port
// state read queries the firmware, so a few reads per VF per interval is
// the budget. The files stay open and are read again at offset 0, which
// makes sysfs (and seq_file) produce the value anew: one pread per file per
// poll instead of open, stat, read and close. A read that fails (the device
// was removed or probed again) closes them all; the next poll opens what is
// there then.
//
// Where the VF's device lives in its pod's netns (RDMA netns exclusive
// mode), the host's sysfs has no such files: a check that finds the device
// there hands the poller files opened in that netns's sysfs instance
// (adopt), and only a later check can open them again.
type portPoll struct {
	sys    sysfs.Reader
	pci    string
	busy   status.Busy // a read is under way, perhaps hanging
	closed atomic.Bool
	// stale asks for the files to be opened anew, as each sweep does: a
	// file replaced rather than removed (not sysfs, whose removed files
	// fail to read) is read from its new inode at least that often.
	stale atomic.Bool
	files []*os.File // nil: open them at the next poll
	last  []byte     // the values read last, concatenated
	buf   []byte
	// fromCheck: the files were handed over by a check (adopt) and are not
	// opened from host paths. Guarded by busy, as files and last are.
	fromCheck bool

	mu      sync.Mutex // guards next and set
	next    *adoption  // files a check handed over, taken by the next read
	adopted string     // what the files handed over last are (fileSet), "" for host paths
}

// adoption is a set of files a check opened, with their values then.
type adoption struct {
	files []*os.File
	last  []byte
}

func newPortPoll(sys sysfs.Reader, pci string) *portPoll {
	return &portPoll{sys: sys, pci: pci, buf: make([]byte, 64)}
}

// changed reads the files and reports whether they differ from the last
// read (not on the first). A VF without RDMA devices has nothing to poll.
func (p *portPoll) changed() bool {
	if !p.busy.Start() {
		return false // a read is hanging
	}
	defer p.release()
	if p.closed.Load() {
		return false
	}
	if a := p.take(); a != nil {
		p.closeFiles()
		p.files, p.last, p.fromCheck = a.files, a.last, a.files != nil
	}
	if p.stale.Swap(false) && !p.fromCheck {
		p.closeFiles()
	}
	if p.files == nil && !p.fromCheck {
		p.files = portFiles(p.sys, p.pci)
	}
	now, ok := sysfs.ReadPolled(nil, p.files, p.buf)
	if !ok {
		p.closeFiles() // gone or probed again: open anew next time
		if p.fromCheck {
			p.mu.Lock()
			p.adopted = "" // the next check hands over new ones
			p.mu.Unlock()
		}
	}
	first := p.last == nil
	diff := !bytes.Equal(now, p.last)
	p.last = now
	return diff && !first
}

// baseline reads the files and keeps their values as those the next read
// compares with (nil: nothing to read).
func (p *portPoll) baseline() {
	if p != nil {
		p.changed()
	}
}

// wants reports whether a check that found the VF's devices as l should
// hand the poller new files: the device moved between the host's view and
// a netns's, or the netns's devices or ports are not those handed over
// last (or those failed to read).
func (p *portPoll) wants(l *rdma.Lookup) (set string, ok bool) {
	if p == nil || l == nil {
		return "", false
	}
	if len(l.Devices) > 0 && l.Devices[0].Source == rdma.NetnsSysfs {
		set = fileSet(l)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return set, set != p.adopted
}

// adopt hands the poller the files of set (none: back to host paths) with
// their values as read now; the next read takes them over.
func (p *portPoll) adopt(set string, files []*os.File, last []byte) {
	p.mu.Lock()
	old := p.next
	p.next, p.adopted = &adoption{files: files, last: last}, set
	p.mu.Unlock()
	if old != nil {
		for _, f := range old.files {
			f.Close()
		}
	}
	if p.closed.Load() {
		p.close() // closed meanwhile: the read that takes them closes them
	}
}

// take returns the files a check handed over since the last read, if any.
func (p *portPoll) take() *adoption {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.next
	p.next = nil
	return a
}

// release ends a read; the files of a poll closed meanwhile are closed now.
func (p *portPoll) release() {
	if p.closed.Load() {
		p.closeFiles()
		if a := p.take(); a != nil {
			for _, f := range a.files {
				f.Close()
			}
		}
	}
	p.busy.End()
}

// close closes the files, now or when the read under way ends.
func (p *portPoll) close() {
	if p == nil {
		return
	}
	p.closed.Store(true)
	if p.busy.Start() {
		p.release()
	}
}

func (p *portPoll) closeFiles() {
	for _, f := range p.files {
		f.Close()
	}
	p.files = nil
}

// portFiles opens the files to poll of the VF's devices under sys
// (sysfs.OpenPolled).
func portFiles(sys sysfs.Reader, pci string) []*os.File {
	files := []*os.File{} // opened: none is not nil
	devs, _ := os.ReadDir(sys.PCIPath(pci, "infiniband"))
	for _, d := range devs {
		files = append(files, sysfs.OpenPolled(sys.PCIPath(pci, "infiniband", d.Name()))...)
	}
	return files
}

// fileSet names the devices and ports a lookup found, so a check knows
// whether the poller already has their files.
func fileSet(l *rdma.Lookup) string {
	var b strings.Builder
	b.WriteString(l.Devices[0].Netns)
	for _, d := range l.Devices {
		fmt.Fprintf(&b, " %s:%d", d.Name, len(d.Ports))
	}
	return b.String()
}

// pollFrom hands the attachment's poller the port files of a device found
// in the pod's netns (or sends it back to host paths), while the check's
// lookup still holds that netns's sysfs instance open. A change between
// the check's read and the poller's first values could slip between the
// two, so one more check is queued after a handover.
func (m *Monitor) pollFrom(rec *state.Record, l *rdma.Lookup) {
	m.mu.Lock()
	var p *portPoll
	if a := m.current(rec); a != nil {
		p = a.ports
	}
	m.mu.Unlock()
	set, ok := p.wants(l)
	if !ok {
		return
	}
	var files []*os.File
	var last []byte
	if set != "" {
		files = portFiles(sysfs.Reader{Root: l.Root()}, l.VF.PCI)
		last, _ = sysfs.ReadPolled(nil, files, make([]byte, 64))
	}
	p.adopt(set, files, last)
	m.queueCheck(rec.Key(), status.TriggerSysfs)
}

// settle is how long a queued check waits for the rest of the change it
// was queued for: a rename is three notifications (down, rename, up) and a
// check between them would report the link down. It is the least latency
// of an event's check.
const settle = 30 * time.Millisecond

// watchRecords updates the monitor's attachments whenever a record file is
// written, renamed or removed, until ctx ends: an event about one file
// reads that file alone (reconcileFile). When the directory itself comes,
// goes or the kernel's queue overflowed, every record is read again.
func (m *Monitor) watchRecords(ctx context.Context, w *state.RecordWatch) {
	stop := context.AfterFunc(ctx, w.Close)
	defer stop()
	for {
		names, all, err := w.Next()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
				m.log.Warn("state directory watch failed; new and deleted records are seen by the sweep", "err", err)
			}
			return
		}
		if all {
			recs, _ := m.store.List() // unreadable files: the sweep reports them
			m.reconcile(recs)
			continue
		}
		for _, name := range names {
			m.reconcileFile(name)
		}
	}
}
