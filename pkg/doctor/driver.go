package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

const driverMLX5 = "mlx5_core"

const remedyRebuildDriver = "the driver was built for another kernel: reinstall MLNX_OFED/DOCA-OFED for the running kernel " +
	"(uname -r; mlnxofedinstall --add-kernel-support, or rebuild its DKMS modules) or boot the kernel it was built for, then reload mlx5_core"

// moduleLoaded reports whether module/<name> exists: loaded, or built in.
func (r *run) moduleLoaded(name string) bool {
	_, err := os.Stat(filepath.Join(r.sys.Root, "module", name))
	return err == nil
}

// checkDriver: mlx5_core is loaded and bound to every Mellanox PF, and a
// bound PF has an RDMA device (mlx5_ib loaded).
func (r *run) checkDriver() {
	if !r.moduleLoaded(driverMLX5) {
		r.add(SeverityError, finding.CheckDriverLoaded, driverMLX5,
			"modprobe mlx5_core; if it fails with \"Unknown symbol\" or \"Invalid argument\", "+remedyRebuildDriver,
			"kernel module mlx5_core is not loaded (no %s/module/mlx5_core): %d Mellanox PFs have no driver",
			r.sys.Root, len(r.inv.pfs))
	}
	var noRDMA []*function
	for _, f := range r.inv.pfs {
		switch f.driver {
		case driverMLX5:
			if len(f.rdma) == 0 {
				noRDMA = append(noRDMA, f)
			}
		case "":
			r.add(SeverityError, finding.CheckDriverBound, f.addr,
				"look for its probe error in the kernel log (dmesg | grep "+f.addr+"), then bind it: echo "+f.addr+
					" > /sys/bus/pci/drivers/mlx5_core/bind",
				"Mellanox PF %s (device %s) is bound to no driver: no netdev, no RDMA device, no VFs", f.addr, f.deviceID)
		default:
			r.add(SeverityError, finding.CheckDriverBound, f.addr,
				"if it is not meant for passthrough: echo "+f.addr+" > /sys/bus/pci/drivers/"+f.driver+"/unbind; echo "+f.addr+
					" > /sys/bus/pci/drivers/mlx5_core/bind (and drop it from the passthrough configuration)",
				"Mellanox PF %s is bound to %s, not mlx5_core: its VFs cannot be used for SR-IOV networking", f.addr, f.driver)
		}
	}
	if len(noRDMA) == 0 {
		return
	}
	if !r.moduleLoaded("mlx5_ib") {
		r.add(SeverityWarning, finding.CheckDriverLoaded, "mlx5_ib", "modprobe mlx5_ib (and add it to /etc/modules-load.d/)",
			"kernel module mlx5_ib is not loaded: %d PFs bound to mlx5_core have no RDMA device, so GUIDs, ports and firmware cannot be checked",
			len(noRDMA))
		return
	}
	for _, f := range noRDMA {
		r.add(SeverityWarning, finding.CheckRDMADevice, f.addr, "check the kernel log for mlx5_ib errors about "+f.addr+"; rebind the PF to mlx5_core",
			"PF %s is bound to mlx5_core but has no RDMA device under infiniband/", f.addr)
	}
}

// Kernel log patterns. A module built for another kernel fails to load with
// "Unknown symbol", "disagrees about version of symbol", "no symbol version
// for" or "version magic" lines; a device the driver could not take shows
// a probe or init failure naming its PCI address.
var (
	kmsgMismatchRE = regexp.MustCompile(`\b(mlx5_core|mlx5_ib|mlx_compat|mlxfw|mlxdevm|ib_core|ib_uverbs|ib_ipoib|rdma_cm): ` +
		`(Unknown symbol|disagrees about version of symbol|no symbol version for|version magic)`)
	kmsgProbeRE = regexp.MustCompile(`\bmlx5_core\b.*(probe|init_one|init one).*\bfail`)
	pciAddrRE   = regexp.MustCompile(`\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b`)
	// A kmsg record header ("6,1234,5678901,-;") or a dmesg timestamp.
	kmsgPrefixRE = regexp.MustCompile(`^(\d+,\d+,\d+,[^;]*;|\[\s*\d+\.\d+\]\s*)`)
)

// logHit aggregates kernel log lines of one kind about one subject.
type logHit struct {
	check, subject string
	count          int
	first          string
}

// checkKernelLog reads the kernel log (Options.KernelLog) for
// driver/kernel mismatches and probe failures. Lines from earlier in this
// boot are errors only while the driver or device is still not working;
// once it is, they are warnings.
func (r *run) checkKernelLog() {
	lines, err := readKernelLog(r.opts.KernelLog)
	if err != nil {
		remedy := "run as root (reading /dev/kmsg needs CAP_SYSLOG when kernel.dmesg_restrict=1), or pass --kmsg with a file of dmesg output"
		if !errors.Is(err, fs.ErrPermission) {
			remedy = "pass --kmsg with /dev/kmsg or a file of dmesg output"
		}
		r.add(SeverityInfo, finding.CheckKernelLog, r.opts.KernelLog, remedy,
			"kernel log not checked for driver/kernel mismatches: %v", err)
		return
	}
	hits := map[string]*logHit{}
	var order []string
	note := func(check, subject, line string) {
		k := check + "\x00" + subject
		h, ok := hits[k]
		if !ok {
			h = &logHit{check: check, subject: subject, first: kmsgPrefixRE.ReplaceAllString(line, "")}
			hits[k] = h
			order = append(order, k)
		}
		h.count++
	}
	for _, line := range lines {
		if m := kmsgMismatchRE.FindStringSubmatch(line); m != nil {
			note(finding.CheckDriverKernelMismatch, m[1], line)
			continue
		}
		if kmsgProbeRE.MatchString(line) {
			subject := pciAddrRE.FindString(line)
			if subject == "" {
				subject = driverMLX5
			}
			note(finding.CheckDriverProbe, subject, line)
		}
	}
	sort.Strings(order)
	for _, k := range order {
		h := hits[k]
		switch h.check {
		case finding.CheckDriverKernelMismatch:
			r.reportMismatch(h)
		case finding.CheckDriverProbe:
			r.reportProbe(h)
		}
	}
}

func (r *run) reportMismatch(h *logHit) {
	sev, now := SeverityError, "it is still not working (not loaded, or a Mellanox PF is unbound)"
	if r.moduleLoaded(h.subject) && r.allPFsBound() {
		sev, now = SeverityWarning, "that was earlier in this boot: it is loaded and every PF is bound now"
	}
	r.add(sev, finding.CheckDriverKernelMismatch, h.subject, remedyRebuildDriver,
		"module %s was built for another kernel: %d kernel log line(s) such as %q; %s",
		h.subject, h.count, truncate(h.first, 160), now)
}

func (r *run) reportProbe(h *logHit) {
	sev, now := SeverityError, ""
	if f, ok := r.inv.byAddr[h.subject]; ok && f.driver == driverMLX5 {
		sev, now = SeverityWarning, " (it is bound now: a later probe worked)"
	}
	r.add(sev, finding.CheckDriverProbe, h.subject,
		"read the lines before it in the kernel log: firmware too old or in recovery (see firmware-version), "+
			"driver/kernel mismatch (see driver-kernel-mismatch) or a PCIe error; reset the device or reboot after fixing",
		"mlx5_core failed to probe %s%s: %d kernel log line(s) such as %q", h.subject, now, h.count, truncate(h.first, 160))
}

func (r *run) allPFsBound() bool {
	for _, f := range r.inv.pfs {
		if f.driver != driverMLX5 {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// firmwareMinimum is the oldest firmware the project supports on a device.
type firmwareMinimum struct {
	deviceID, model, min string
}

// firmwareMinimums is keyed by PCI device ID (the PF's "device" file).
var firmwareMinimums = []firmwareMinimum{
	{"0x1021", "ConnectX-7", "28.43.1014"},
	{"0xa2dc", "BlueField-3", "32.43.1014"},
}

func minimumFor(deviceID string) (firmwareMinimum, bool) {
	for _, m := range firmwareMinimums {
		if strings.EqualFold(m.deviceID, deviceID) {
			return m, true
		}
	}
	return firmwareMinimum{}, false
}

// checkFirmware compares each PF's fw_ver with the minimum for its device
// ID. Both PFs of a dual-port card report the card's firmware; each is
// reported, since each is what an operator greps for.
func (r *run) checkFirmware() {
	unknown := map[string][]string{}
	for _, f := range r.inv.pfs {
		if f.fwVer == "" {
			continue // reported by checkDriver, or no fw_ver to judge
		}
		fw := f.fwVer
		m, ok := minimumFor(f.deviceID)
		if !ok {
			unknown[f.deviceID] = append(unknown[f.deviceID], f.addr)
			continue
		}
		remedy := fmt.Sprintf("update the firmware to %s or later (mlxfwmanager -d %s --online -u, or flint with the PSID's image), "+
			"then reset the card (mlxfwreset -d %s reset) or power-cycle the node", m.min, f.addr, f.addr)
		cmp, err := compareVersions(fw, m.min)
		if err != nil {
			r.add(SeverityWarning, finding.CheckFirmwareVersion, f.addr, remedy, "%s firmware version %q of %s cannot be read: %v", m.model, fw, f.addr, err)
			continue
		}
		if cmp < 0 {
			r.add(SeverityError, finding.CheckFirmwareVersion, f.addr, remedy,
				"%s firmware %s on %s is older than the minimum %s", m.model, fw, f.addr, m.min)
		}
	}
	ids := make([]string, 0, len(unknown))
	for id := range unknown {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r.add(SeverityInfo, finding.CheckFirmwareVersion, id, "",
			"firmware of %s (device ID %s) not judged: no minimum version is known for this device", strings.Join(unknown[id], ", "), id)
	}
}

// compareVersions compares dotted firmware versions numerically
// ("28.43.1014" > "28.9.2000"); text after a space is ignored.
func compareVersions(a, b string) (int, error) {
	pa, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	pb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		if x != y {
			if x < y {
				return -1, nil
			}
			return 1, nil
		}
	}
	return 0, nil
}

func parseVersion(v string) ([]int, error) {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty version")
	}
	var out []int
	for _, p := range strings.Split(fields[0], ".") {
		n := 0
		if p == "" || len(p) > 9 {
			return nil, fmt.Errorf("version %q is not numbers separated by dots", v)
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return nil, fmt.Errorf("version %q is not numbers separated by dots", v)
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out, nil
}
