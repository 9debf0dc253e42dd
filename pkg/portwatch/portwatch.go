// Package portwatch is the agent's free-VF health source: it watches the
// RDMA ports the host sees (every PF's, and every VF's whose device is in
// the host's netns: the free ones, and in shared mode the attached ones
// too) for a change of state, link layer or node GUID, which the kernel
// announces to no one, and the host netdevs of their PCI functions for a
// change of admin state or carrier, which it announces only to netlink
// sockets in the host's netns (the agent runs in its pod's). It re-reads
// those attributes every interval through files it keeps open and on a
// change runs the doctor's port checks (doctor.Ports) and hands on their
// findings, so a free VF whose port goes down or whose carrier drops is
// known to the node condition and its device taint in about a second
// rather than at the next doctor run.
package portwatch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/doctor"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// DefaultInterval is how often the port attributes are read.
const DefaultInterval = time.Second

// maxChecksPerPoll bounds the checks one interval runs while the
// attributes keep changing under them.
const maxChecksPerPoll = 3

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
	Logger  *slog.Logger
}

// device is one class/infiniband entry's open attribute files, and those
// of its PCI function's netdevs (as listed when they were opened).
type device struct {
	entry    sysfs.RDMAEntry
	pci      string // the PCI function the device belongs to
	files    []*os.File
	netdevs  []string
	netFiles []*os.File
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
	return &Watcher{cfg: cfg, sys: sysfs.Reader{Root: root}, log: cfg.Logger, devs: map[string]*device{}, buf: make([]byte, 64)}
}

// Run reads the ports and netdevs every interval until ctx ends; then it
// closes its files. The first read always runs the checks.
func (w *Watcher) Run(ctx context.Context) {
	defer w.close()
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	confirm := false
	for {
		confirm = w.round(confirm)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round is one interval's polls and checks; confirm says the last check
// handed on new findings, and so does the result.
//
// A change between a poll and its check is in the check's findings but
// not in the values polled: it polls again until a poll matches the one
// before it (a few times at most, should a port flap). And a check that
// handed on new findings is followed by one more after the next poll,
// changed or not: a port that went down after a poll read it and came
// back before the next one polls the same twice, while the findings
// handed on still say down. What stays unseen is a port that flaps twice
// within one check's reads.
func (w *Watcher) round(confirm bool) bool {
	for range maxChecksPerPoll {
		if !w.Poll() && !confirm {
			break
		}
		confirm = w.Check()
	}
	return confirm
}

// Poll lists class/infiniband and each device's netdevs, opens the files of
// devices that are new (or came back: a new inode) and of netdevs that
// changed, closes those of devices gone, and reads every file; it reports
// whether anything differs from the last poll (the first poll always
// does).
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
				closeAll(d.netFiles)
			}
			d = &device{entry: e, pci: w.sys.DevicePCI(e.Name), files: sysfs.OpenPolled(w.sys.RDMAPath(e.Name))}
			w.devs[e.Name] = d
		}
		if names := w.sys.Netdevs(d.pci); !slices.Equal(names, d.netdevs) {
			closeAll(d.netFiles)
			d.netdevs, d.netFiles = names, w.sys.OpenNetdevs(d.pci, names)
		}
		now, _ = sysfs.ReadPolled(append(append(now, e.Name...), 0), d.files, w.buf)
		now, _ = sysfs.ReadPolled(append(now, 0), d.netFiles, w.buf)
	}
	for name, d := range w.devs {
		if !seen[name] {
			closeAll(d.files)
			closeAll(d.netFiles)
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
// changed; it reports whether it did.
func (w *Watcher) Check() bool {
	rep, err := doctor.Ports(w.cfg.Doctor)
	if err != nil {
		if err.Error() != w.failed {
			w.log.Warn("cannot run the port checks; free VFs' ports are known at the next doctor run", "err", err)
		}
		w.failed = err.Error()
		return false
	}
	w.failed = ""
	if w.sent != nil && slices.EqualFunc(w.sent.Findings, rep.Findings, finding.Finding.Equal) && slices.Equal(w.sent.Functions, rep.Functions) {
		return false
	}
	w.sent = rep
	w.log.Debug("port checks changed", "functions", len(rep.Functions), "errors", countErrors(rep.Findings))
	if w.cfg.Changed != nil {
		w.cfg.Changed(rep)
	}
	return true
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
		closeAll(d.netFiles)
		delete(w.devs, name)
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
