package hostconfig

import (
	"errors"
	"fmt"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

// The pf-derived GUID scheme. A Mellanox/NVIDIA InfiniBand GUID is
//
//	OUI (3 bytes) | 03 00 | serial (3 bytes)        e.g. b8:3f:d2:03:00:a1:b2:c4
//
// with a universally administered, unicast OUI. The VF's GUIDs keep the OUI
// and the serial and replace the constant 03:00 with the VF index and a
// node/port bit, and set the OUI's locally administered bit:
//
//	OUI|0x02 (1 byte) OUI[1:3] | kind<<15 | vf (2 bytes) | serial (3 bytes)
//	node GUID of VF 5: ba:3f:d2:00:05:a1:b2:c4
//	port GUID of VF 5: ba:3f:d2:80:05:a1:b2:c4
//
// Injective: every input byte is kept or recoverable (the cleared U/L bit,
// the constant 03:00), and kind and vf sit in bytes of their own, so the
// PF GUID, VF index and kind can be read back from any output. Distinct
// PF GUIDs (which a fabric already requires) therefore give distinct VF
// GUIDs. The local bit keeps them apart from every burned-in GUID; the
// group bit stays clear, so no output is all-F, and byte 0 has the local
// bit, so none is zero.
const (
	guidGroupBit   = 0x01 // I/G bit of byte 0: a group address, never a port's
	guidLocalBit   = 0x02 // U/L bit of byte 0: locally administered
	guidIBMarker   = 0x0300
	guidKindPort   = 1 << 15
	guidFieldShift = 24 // bytes 3-4 of the big-endian GUID
)

// ErrGUIDNotDerivable reports a PF GUID outside the scheme's domain: the VF
// GUIDs it would seed could not be proven unique.
var ErrGUIDNotDerivable = errors.New("PF GUID cannot seed VF GUIDs")

// VFGUIDs are the node and port GUID of one VF.
type VFGUIDs struct {
	Node sysfs.GUID
	Port sysfs.GUID
}

// CheckPFGUID says whether a PF GUID can seed VF GUIDs: not zero or all-F,
// universally administered, unicast, with 03:00 in bytes 3-4.
func CheckPFGUID(pf sysfs.GUID) error {
	b0 := byte(pf >> 56)
	switch {
	case !pf.Valid():
		return fmt.Errorf("%w: %s is unset (zero or all-F); the PF's firmware or driver has not reported its GUID", ErrGUIDNotDerivable, pf.Colon())
	case b0&guidLocalBit != 0:
		return fmt.Errorf("%w: %s is locally administered, not burned in; its derived GUIDs could collide", ErrGUIDNotDerivable, pf.Colon())
	case b0&guidGroupBit != 0:
		return fmt.Errorf("%w: %s has the group bit set; it is not a port GUID", ErrGUIDNotDerivable, pf.Colon())
	case uint16(pf>>guidFieldShift) != guidIBMarker:
		return fmt.Errorf("%w: %s does not have 03:00 in bytes 4-5 like a Mellanox InfiniBand GUID", ErrGUIDNotDerivable, pf.Colon())
	}
	return nil
}

// DeriveVFGUIDs returns the node and port GUID of VF vf of the PF whose
// burned-in port GUID is pf. See the scheme above.
func DeriveVFGUIDs(pf sysfs.GUID, vf int) (VFGUIDs, error) {
	if err := CheckPFGUID(pf); err != nil {
		return VFGUIDs{}, err
	}
	if vf < 0 || vf >= MaxVFs {
		return VFGUIDs{}, fmt.Errorf("VF index %d is out of range 0..%d", vf, MaxVFs-1)
	}
	base := uint64(pf) | guidLocalBit<<56
	base &^= 0xffff << guidFieldShift
	return VFGUIDs{
		Node: sysfs.GUID(base | uint64(vf)<<guidFieldShift),
		Port: sysfs.GUID(base | uint64(guidKindPort|vf)<<guidFieldShift),
	}, nil
}
