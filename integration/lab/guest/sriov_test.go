//go:build labguest

package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

const sysPCI = "/sys/bus/pci/devices"

// vf is one virtual function as the lab first saw it in the root netns.
type vf struct {
	PCI    string // e.g. 0000:01:10.0
	PF     string // the PF's PCI address
	Index  int    // N of the PF's virtfnN
	Name   string // kernel name at setup (the lab restores it after every scenario)
	MAC    string
	PFLink string // the PF's netdev
}

func (v vf) String() string { return fmt.Sprintf("VF %s (%s)", v.PCI, v.Name) }

// pf is one igb physical function and its VFs.
type pf struct {
	PCI  string
	Link string
	VFs  []vf
}

type lab struct {
	PFs []pf
	// firstCarrier is how long each VF took from its first link up to
	// carrier, at setup.
	firstCarrier []time.Duration
}

func (l *lab) String() string {
	var b strings.Builder
	for i, p := range l.PFs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "PF %s (%s) with %d VFs", p.PCI, p.Link, len(p.VFs))
	}
	return b.String()
}

// allVFs lists the VFs of every PF, PF by PF.
func (l *lab) allVFs() []vf {
	var out []vf
	for _, p := range l.PFs {
		out = append(out, p.VFs...)
	}
	return out
}

// setUpLab finds the igb PFs, gives each n VFs and records every VF's
// kernel name and MAC.
func setUpLab(n int) (*lab, error) {
	pfs, err := igbPFs()
	if err != nil {
		return nil, err
	}
	if len(pfs) == 0 {
		return nil, errors.New("no igb PF found under /sys/bus/pci/drivers/igb")
	}
	l := &lab{}
	for _, addr := range pfs {
		p, err := enableVFs(addr, n)
		if err != nil {
			return nil, err
		}
		l.PFs = append(l.PFs, p)
	}
	if l.firstCarrier, err = warmUp(l.allVFs()); err != nil {
		return nil, err
	}
	return l, nil
}

// warmUp sets every VF up in the root netns at once, waits for carrier and
// sets them down again, returning how long each took. A VF's first link up
// after its creation (or after a PF reset) takes seconds under TCG, later
// ones a fraction of a second: warming up makes every scenario start from a
// node whose VFs have come up before, as on a running node.
func warmUp(vfs []vf) ([]time.Duration, error) {
	took := make([]time.Duration, len(vfs))
	errs := make([]error, len(vfs))
	var wg sync.WaitGroup
	for i, v := range vfs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], errs[i] = cycleLink(v)
		}()
	}
	wg.Wait()
	return took, errors.Join(errs...)
}

// cycleLink sets a VF up in the root netns, waits for carrier, and sets it
// down. A VF that comes up during its PF's reset (igb resets the adapter
// once its VFs are enabled) can miss the PF's mailbox reply and stay
// without carrier until it is opened again: after 15 s it is set down and
// up again, three tries in all.
// Equivalent to: ip link set $vf up; (wait for LOWER_UP); ip link set $vf down
func cycleLink(v vf) (time.Duration, error) {
	l, err := rootLinkOf(v.PCI)
	if err != nil {
		return 0, err
	}
	name := l.Attrs().Name
	start := time.Now()
	var errs []error
	for try := 1; try <= 3; try++ {
		if err := setLinkUp(rootNetns, name, true); err != nil {
			return 0, fmt.Errorf("%s: %w", v, err)
		}
		err = waitCarrier(rootNetns, v, true, 15*time.Second)
		if err == nil {
			took := time.Since(start)
			return took, setLinkUp(rootNetns, name, false)
		}
		errs = append(errs, fmt.Errorf("try %d: %w", try, err))
		if err := setLinkUp(rootNetns, name, false); err != nil {
			return 0, fmt.Errorf("%s: %w", v, err)
		}
		time.Sleep(time.Second)
	}
	return time.Since(start), errors.Join(errs...)
}

// igbPFs lists the PCI addresses bound to the igb driver, sorted.
func igbPFs() ([]string, error) {
	matches, err := filepath.Glob("/sys/bus/pci/drivers/igb/0000:*")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		out = append(out, filepath.Base(m))
	}
	sort.Strings(out)
	return out, nil
}

// enableVFs writes sriov_numvfs and waits until igbvf has bound every VF
// and given it a netdev. Equivalent to: echo $n > /sys/bus/pci/devices/$pf/sriov_numvfs
func enableVFs(addr string, n int) (pf, error) {
	p := pf{PCI: addr}
	link, err := netdevOf(addr)
	if err != nil {
		return p, fmt.Errorf("PF %s: %w", addr, err)
	}
	p.Link = link
	numPath := filepath.Join(sysPCI, addr, "sriov_numvfs")
	if cur, _ := readInt(numPath); cur != n {
		if cur != 0 {
			if err := os.WriteFile(numPath, []byte("0"), 0); err != nil {
				return p, fmt.Errorf("reset VFs of %s: %w", addr, err)
			}
		}
		if err := os.WriteFile(numPath, []byte(strconv.Itoa(n)), 0); err != nil {
			return p, fmt.Errorf("create %d VFs on %s: %w", n, addr, err)
		}
	}
	for i := 0; i < n; i++ {
		v, err := waitVF(addr, link, i, 20*time.Second)
		if err != nil {
			return p, err
		}
		p.VFs = append(p.VFs, v)
	}
	return p, nil
}

// reload re-reads every PF's VFs after something removed and re-created
// them (new VFs get new MACs), creating them again if they are gone. The
// names recorded at setup stay: the hygiene after each scenario gives them
// back. Scenarios run one at a time, so nothing reads the lab meanwhile.
func (l *lab) reload() error {
	for i, p := range l.PFs {
		fresh, err := enableVFs(p.PCI, len(p.VFs))
		if err != nil {
			return err
		}
		for j, v := range p.VFs {
			if fresh.VFs[j].PCI != v.PCI {
				return fmt.Errorf("PF %s VF %d is %s now, was %s", p.PCI, j, fresh.VFs[j].PCI, v.PCI)
			}
			l.PFs[i].VFs[j].MAC = fresh.VFs[j].MAC
		}
	}
	return nil
}

// waitVF waits for the PF's virtfnN to have a netdev in the root netns.
func waitVF(pfAddr, pfLink string, i int, timeout time.Duration) (vf, error) {
	v := vf{PF: pfAddr, Index: i, PFLink: pfLink}
	target, err := os.Readlink(filepath.Join(sysPCI, pfAddr, fmt.Sprintf("virtfn%d", i)))
	if err != nil {
		return v, fmt.Errorf("PF %s has no virtfn%d: %w", pfAddr, i, err)
	}
	v.PCI = filepath.Base(target)
	err = poll(timeout, func() error {
		l, err := rootLinkOf(v.PCI)
		if err != nil {
			return err
		}
		v.Name, v.MAC = l.Attrs().Name, l.Attrs().HardwareAddr.String()
		return nil
	})
	return v, err
}

// netdevOf returns the single netdev a PCI function has in the root netns.
func netdevOf(addr string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(sysPCI, addr, "net"))
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("no netdev under %s/net", addr)
	}
	return entries[0].Name(), nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// rootLinkOf finds the VF's netdev in the root netns by its PCI parent.
func rootLinkOf(pci string) (netlink.Link, error) {
	return linkByParent(rootNetns, pci)
}

// poll retries f every 50 ms until it succeeds or timeout passes, and
// returns f's last error then.
func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
