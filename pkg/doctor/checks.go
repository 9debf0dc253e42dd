package doctor

import (
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/finding"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/hostconfig"
)

// step is a row of the doctor's table: a function that runs and the
// registered checks (package finding) it reports. One function reports
// more than one check where they come from one read: the kernel log's
// lines, a port's attributes, the GUIDs of every function.
type step struct {
	run     func(*run)
	reports []string
	// mellanox: run only where sysfs shows Mellanox functions.
	mellanox bool
}

// steps are the doctor's checks in the order Run runs them, each where the
// options give what its checks need (finding.Check.Needs). A new check is
// its function in a file of its own, its entry in finding's registry and
// its row here.
var steps = []step{
	{run: (*run).reportUnreadable, reports: []string{finding.CheckSysfs}},
	{run: (*run).reportNoDevices, reports: []string{finding.CheckDevices}},
	{run: (*run).checkDriver, reports: []string{finding.CheckDriverLoaded, finding.CheckDriverBound, finding.CheckRDMADevice}, mellanox: true},
	{run: (*run).checkKernelLog, reports: []string{finding.CheckDriverKernelMismatch, finding.CheckDriverProbe, finding.CheckKernelLog}, mellanox: true},
	{run: (*run).checkFirmware, reports: []string{finding.CheckFirmwareVersion}, mellanox: true},
	{run: (*run).checkPorts, reports: []string{finding.CheckPortState, finding.CheckLinkLayer}}, // every vendor's RDMA ports
	{run: (*run).checkCarrier, reports: []string{finding.CheckCarrier}},                         // their host netdevs
	{run: (*run).checkGUIDs, reports: []string{finding.CheckGUIDInvalid, finding.CheckGUIDDuplicate}, mellanox: true},
	{run: (*run).checkNumVFs, reports: []string{finding.CheckSRIOVNumVFs}, mellanox: true},
	{run: (*run).checkNames, reports: []string{finding.CheckVFName, finding.CheckVFAltName}, mellanox: true},
	// With a spec, hostconfig's checks join the doctor's (spec.go).
	{run: (*run).checkSpec, reports: append([]string{finding.CheckSpec}, hostconfig.Checks...)},
	{run: (*run).checkLeftovers, reports: []string{finding.CheckVFLeftover, finding.CheckRDMANetns}},
}

// needs is every input the step's checks read.
func (s step) needs() finding.Needs {
	var n finding.Needs
	for _, name := range s.reports {
		c, _ := finding.Lookup(name)
		n |= c.Needs
	}
	return n
}
