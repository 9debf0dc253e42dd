// Package crashpoint names the moments of ADD and DEL at which the crash
// test (integration/reliability, TestCrashDuringAdd) kills the plugin. Only
// a binary built with the crashpoints tag, which that test builds for itself,
// can kill (hit.go); in every other build, make build's included, Hit is
// empty (nohit.go) and the compiler drops its calls and the points' names.
package crashpoint

// Env names the point at which a crashpoints build kills itself.
const Env = "SRIOV_STABLE_CNI_CRASH_POINT"

// Point is a place between two of the plugin's changes.
type Point string

// The points, in the order ADD and DEL pass them. docs/reliability.md says
// what must hold after a kill at each.
const (
	// Renamed: ADD renamed the VF to CNI_IFNAME (repairName).
	Renamed Point = "renamed"
	// AltNameAdded: ADD added the stable altname to a VF that lacked it
	// (ensureAltName). A VF is found without its altname only by its PCI
	// parent or ethtool bus-info, which veth stand-ins lack: the lab's
	// real VFs reach this point (TestLab16CrashAfterAltNameAdded).
	AltNameAdded Point = "altname-added"
	// OwnerSet: ADD indexed its attachment as the VF's owner, before
	// writing the record (recordAttachment).
	OwnerSet Point = "owner-set"
	// TempWritten: a state file is written and synced to its temp file,
	// not yet renamed into place (the atomic write of a record or of the
	// GUID index).
	TempWritten Point = "temp-written"
	// Recorded: ADD wrote the record; its result is not printed yet.
	Recorded Point = "recorded"
	// UndoOwnerFreed: a failed ADD's rollback cleared the owner index; the
	// undos registered before it have not run yet.
	UndoOwnerFreed Point = "undo-owner-freed"
	// UndoRenamedBack: a failed ADD's rollback gave the VF back the name
	// ADD found it under.
	UndoRenamedBack Point = "undo-renamed-back"
	// DelHandedBack: DEL handed the VF back (CNI_IFNAME, our altname
	// removed); the record is still there.
	DelHandedBack Point = "del-handed-back"
	// DelRecordRemoved: DEL removed the record; the owner index still
	// names it.
	DelRecordRemoved Point = "del-record-removed"
)
