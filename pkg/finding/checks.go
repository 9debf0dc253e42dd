package finding

import (
	"slices"
	"strings"
)

// Check names, each the Name of one entry of the registry below. They are
// stable: the agent exports them as metric labels, the node condition's
// message and the docs (docs/doctor.md) name them.
const (
	CheckDevices              = "devices"
	CheckSysfs                = "sysfs"
	CheckDriverLoaded         = "driver-loaded"
	CheckDriverBound          = "driver-bound"
	CheckDriverKernelMismatch = "driver-kernel-mismatch"
	CheckDriverProbe          = "driver-probe"
	CheckKernelLog            = "kernel-log"
	CheckRDMADevice           = "rdma-device"
	CheckFirmwareVersion      = "firmware-version"
	CheckLinkLayer            = "link-layer"
	CheckPortState            = "port-state"
	CheckCarrier              = "carrier"
	CheckGUIDInvalid          = "guid-invalid"
	CheckGUIDDuplicate        = "guid-duplicate"
	CheckSRIOVNumVFs          = "sriov-numvfs"
	CheckVFName               = "vf-name"
	CheckVFAltName            = "vf-altname"
	CheckVFLeftover           = "vf-leftover"
	CheckRDMANetns            = "rdma-netns"
	CheckSpec                 = "hostconfig-spec"
	CheckPFPresent            = "pf-present"
	CheckVFAddress            = "vf-address"
	CheckGUIDMismatch         = "guid-mismatch"
	CheckGUIDUnderivable      = "guid-underivable"
)

// Needs is the set of inputs a check reads: a caller runs a check only
// when it has them all (the doctor skips the kernel log checks without a
// kernel log, the spec's without a spec).
type Needs uint8

// Inputs a check can need.
const (
	NeedSysfs     Needs = 1 << iota // PCI functions, drivers, RDMA devices and ports under the sysfs root
	NeedKernelLog                   // /dev/kmsg or a file of dmesg output
	NeedLinks                       // the host network namespace's links over netlink: altnames, parent devices
	NeedSpec                        // the node's hostconfig spec
	NeedStateDir                    // the plugin's attachment records
)

var needNames = []string{"sysfs", "kernel log", "links", "hostconfig spec", "state dir"}

// Has reports whether n holds every input of m.
func (n Needs) Has(m Needs) bool { return n&m == m }

// String lists the inputs: "sysfs, kernel log".
func (n Needs) String() string {
	var s []string
	for i, name := range needNames {
		if n.Has(1 << i) {
			s = append(s, name)
		}
	}
	return strings.Join(s, ", ")
}

// Taint is the DRA device taint an error of a check puts on the function
// it is about, and, when CoversVFs, on every VF a PF's finding covers
// (Finding.Covers): a port's state and link layer are the PF's, a GUID is
// each function's own.
type Taint struct {
	Key, Value string
	CoversVFs  bool
}

// Device taint keys, one per kind of VF health; they are under the
// agent's API domain, kubereport.Domain.
const (
	TaintGUID      = "sriov-stable-cni.io/guid"
	TaintPortState = "sriov-stable-cni.io/port-state"
	TaintLinkLayer = "sriov-stable-cni.io/link-layer"
	TaintCarrier   = "sriov-stable-cni.io/carrier"
	// TaintFabricGUID is the fabric controller's verdict, not a check's:
	// the VF came second to a GUID another VF of the cluster holds
	// (kubereport.Reporter.Fabric, opt-in).
	TaintFabricGUID = "sriov-stable-cni.io/fabric-guid"
)

// Check is one check as the registry declares it: its name, what it
// checks, what it reads, and the device taint its errors call for (nil:
// none). What runs it is its callers': the doctor's table of steps and
// hostconfig's Checker.
type Check struct {
	Name        string
	Doc         string
	Needs       Needs
	DeviceTaint *Taint
}

// checks is the registry: every check the doctor and hostconfig --check
// report, once. A new check is an entry here and its run function in a
// caller (a file of its own in pkg/doctor, with a row in its steps).
var checks = []Check{
	{Name: CheckDevices, Needs: NeedSysfs, Doc: "Mellanox (vendor 0x15b3) PCI functions under the sysfs root, or that there are none"},
	{Name: CheckSysfs, Needs: NeedSysfs, Doc: "a Mellanox function's sysfs entry that cannot be read or parsed"},
	{Name: CheckDriverLoaded, Needs: NeedSysfs, Doc: "mlx5_core (and, for RDMA devices, mlx5_ib) loaded"},
	{Name: CheckDriverBound, Needs: NeedSysfs, Doc: "a driver (the doctor: mlx5_core) bound to every PF, and hostconfig's VFs"},
	{Name: CheckDriverKernelMismatch, Needs: NeedKernelLog | NeedSysfs, Doc: "kernel log lines of a module built for another kernel"},
	{Name: CheckDriverProbe, Needs: NeedKernelLog | NeedSysfs, Doc: "kernel log lines of mlx5_core failing to probe a device"},
	{Name: CheckKernelLog, Needs: NeedKernelLog, Doc: "the kernel log could not be read"},
	{Name: CheckRDMADevice, Needs: NeedSysfs, Doc: "a PF bound to mlx5_core has an RDMA device"},
	{Name: CheckFirmwareVersion, Needs: NeedSysfs, Doc: "a PF's fw_ver against the minimum for its device ID"},
	{Name: CheckLinkLayer, Needs: NeedSysfs, Doc: "a port's link layer against the one expected",
		DeviceTaint: &Taint{Key: TaintLinkLayer, Value: "mismatch", CoversVFs: true}},
	{Name: CheckPortState, Needs: NeedSysfs, Doc: "a port is ACTIVE / LinkUp",
		DeviceTaint: &Taint{Key: TaintPortState, Value: "not-active", CoversVFs: true}},
	{Name: CheckCarrier, Needs: NeedSysfs, Doc: "a host netdev that is up has carrier (a free VF's, or its PF's)",
		DeviceTaint: &Taint{Key: TaintCarrier, Value: "down", CoversVFs: true}},
	{Name: CheckGUIDInvalid, Needs: NeedSysfs, Doc: "a node or port GUID zero or all-F",
		DeviceTaint: &Taint{Key: TaintGUID, Value: "invalid"}},
	{Name: CheckGUIDDuplicate, Needs: NeedSysfs, Doc: "a node or port GUID shared by two functions",
		DeviceTaint: &Taint{Key: TaintGUID, Value: "duplicate"}},
	{Name: CheckSRIOVNumVFs, Needs: NeedSysfs, Doc: "VFs created against sriov_totalvfs and the count expected"},
	{Name: CheckVFName, Needs: NeedSysfs, Doc: "host VF netdev names against the naming policy or the spec"},
	{Name: CheckVFAltName, Needs: NeedSysfs | NeedLinks, Doc: "the stable altname on host VF netdevs, held by no other link"},
	{Name: CheckVFLeftover, Needs: NeedStateDir | NeedSysfs | NeedLinks, Doc: "a free host VF carrying a name or altnames a pod or the kernel left on it"},
	{Name: CheckRDMANetns, Needs: NeedStateDir | NeedSysfs, Doc: "an attached VF whose RDMA device is in its pod's netns, and what it reports there"},
	{Name: CheckSpec, Needs: NeedSpec | NeedSysfs, Doc: "the hostconfig spec resolves on this node, and what of it could not be checked"},
	{Name: CheckPFPresent, Needs: NeedSpec | NeedSysfs, Doc: "a PF the spec names exists and is SR-IOV capable"},
	{Name: CheckVFAddress, Needs: NeedSpec | NeedSysfs, Doc: "each virtfnN link points where the generated .link files expect"},
	{Name: CheckGUIDMismatch, Needs: NeedSpec | NeedSysfs, Doc: "a VF's GUIDs against the ones derived from its PF's"},
	{Name: CheckGUIDUnderivable, Needs: NeedSpec | NeedSysfs, Doc: "a PF GUID can seed VF GUIDs"},
}

// All returns the registry, in the order the doctor documents its checks.
func All() []Check {
	return slices.Clone(checks)
}

// Lookup returns the registered check of a name.
func Lookup(name string) (Check, bool) {
	for _, c := range checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}
