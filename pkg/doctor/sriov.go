package doctor

import (
	"fmt"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
)

// checkNumVFs compares each SR-IOV capable PF's sriov_numvfs with its
// sriov_totalvfs, the expected count and the virtfnN links the kernel made.
func (r *run) checkNumVFs() {
	want := r.opts.ExpectVFs
	for _, f := range r.inv.pfs {
		if f.totalVFs < 0 || f.numVFs < 0 {
			continue // not SR-IOV capable (or unreadable: already a sysfs finding)
		}
		create := fmt.Sprintf("echo %d > /sys/bus/pci/devices/%s/sriov_numvfs, or let the hostconfig boot unit create them", max(want, 1), f.addr)
		if f.numVFs > 0 {
			create = fmt.Sprintf("echo 0 > /sys/bus/pci/devices/%[2]s/sriov_numvfs; echo %[1]d > /sys/bus/pci/devices/%[2]s/sriov_numvfs "+
				"(this removes the PF's VFs: drain its pods first), or let the hostconfig boot unit create them", max(want, 1), f.addr)
		}
		switch {
		case want > 0 && want > f.totalVFs:
			r.add(SeverityError, finding.CheckSRIOVNumVFs, f.addr,
				fmt.Sprintf("raise the firmware limit: mlxconfig -d %s set SRIOV_EN=1 NUM_OF_VFS=%d, then mlxfwreset -d %s reset or reboot", f.addr, want, f.addr),
				"PF %s allows %d VFs (sriov_totalvfs), %d are expected", f.addr, f.totalVFs, want)
		case want > 0 && f.numVFs != want:
			r.add(SeverityError, finding.CheckSRIOVNumVFs, f.addr, create,
				"PF %s has %d VFs (sriov_numvfs), %d are expected", f.addr, f.numVFs, want)
		case want == 0 && f.numVFs == 0 && f.totalVFs > 0:
			r.add(SeverityWarning, finding.CheckSRIOVNumVFs, f.addr, create,
				"PF %s has no VFs (sriov_numvfs is 0 of %d allowed)", f.addr, f.totalVFs)
		}
		if f.vfs != nil && len(f.vfs) != f.numVFs {
			r.add(SeverityError, finding.CheckSRIOVNumVFs, f.addr,
				"VF creation failed part way: write 0 to sriov_numvfs, then the count again, and read the kernel log",
				"PF %s says sriov_numvfs %d but has %d virtfnN links", f.addr, f.numVFs, len(f.vfs))
		}
	}
}
