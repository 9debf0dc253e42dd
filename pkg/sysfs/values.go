package sysfs

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// GUID is an InfiniBand node or port GUID.
type GUID uint64

// Zero and AllOnes are the GUIDs the kernel and firmware report for "not
// assigned"; neither is usable on a fabric.
const (
	GUIDZero    GUID = 0
	GUIDAllOnes GUID = ^GUID(0)
)

// Valid reports whether the GUID is neither zero nor all-F.
func (g GUID) Valid() bool { return g != GUIDZero && g != GUIDAllOnes }

// String formats as sysfs does: xxxx:xxxx:xxxx:xxxx.
func (g GUID) String() string {
	s := fmt.Sprintf("%016x", uint64(g))
	return s[0:4] + ":" + s[4:8] + ":" + s[8:12] + ":" + s[12:16]
}

// Colon formats as iproute2 does: xx:xx:xx:xx:xx:xx:xx:xx.
func (g GUID) Colon() string {
	return net.HardwareAddr(binary.BigEndian.AppendUint64(nil, uint64(g))).String()
}

// ParseGUID reads "xxxx:xxxx:xxxx:xxxx" (sysfs), "xx:xx:…:xx" (iproute2) or
// 16 bare hex digits.
func ParseGUID(s string) (GUID, error) {
	digits := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	v, err := strconv.ParseUint(digits, 16, 64)
	if err != nil || len(digits) != 16 {
		return 0, fmt.Errorf("GUID %q: want 16 hex digits", s)
	}
	return GUID(v), nil
}

// ParseGIDInterfaceID reads a GID as sysfs writes it
// ("fe80:0000:0000:0000:a288:c2ff:fe18:0000") and returns its interface ID,
// the last 64 bits: the port GUID for an InfiniBand port's GID 0.
func ParseGIDInterfaceID(s string) (GUID, error) {
	s = strings.TrimSpace(s)
	groups := strings.Split(s, ":")
	if len(groups) != 8 {
		return 0, fmt.Errorf("GID %q: want 8 groups of 4 hex digits", s)
	}
	for _, g := range groups {
		if len(g) != 4 {
			return 0, fmt.Errorf("GID %q: want 8 groups of 4 hex digits", s)
		}
	}
	return ParseGUID(strings.Join(groups[4:], ""))
}

// Logical port states (ports/N/state).
const (
	PortDown        = 1
	PortInit        = 2
	PortArmed       = 3
	PortActive      = 4
	PortActiveDefer = 5
)

// Physical port states (ports/N/phys_state).
const (
	PhysSleep             = 1
	PhysPolling           = 2
	PhysDisabled          = 3
	PhysPortConfigTrain   = 4
	PhysLinkUp            = 5
	PhysLinkErrorRecovery = 6
	PhysPhyTest           = 7
)

// PortState is a parsed ports/N/state value such as "4: ACTIVE".
type PortState struct {
	Num  int
	Name string
}

func (s PortState) String() string { return fmt.Sprintf("%d: %s", s.Num, s.Name) }

// PhysState is a parsed ports/N/phys_state value such as "5: LinkUp".
type PhysState struct {
	Num  int
	Name string
}

func (s PhysState) String() string { return fmt.Sprintf("%d: %s", s.Num, s.Name) }

var portStateNames = map[int]string{
	PortDown: "DOWN", PortInit: "INIT", PortArmed: "ARMED", PortActive: "ACTIVE", PortActiveDefer: "ACTIVE_DEFER",
}

var physStateNames = map[int]string{
	PhysSleep: "Sleep", PhysPolling: "Polling", PhysDisabled: "Disabled", PhysPortConfigTrain: "PortConfigurationTraining",
	PhysLinkUp: "LinkUp", PhysLinkErrorRecovery: "LinkErrorRecovery", PhysPhyTest: "Phy Test",
}

// ParsePortState reads "N: NAME". An unknown number is kept with the name
// the kernel gave; a missing number is an error.
func ParsePortState(s string) (PortState, error) {
	n, name, err := parseNumbered(s)
	if err != nil {
		return PortState{}, fmt.Errorf("port state: %w", err)
	}
	if name == "" {
		name = portStateNames[n]
	}
	return PortState{Num: n, Name: name}, nil
}

// ParsePhysState reads "N: Name" like ParsePortState.
func ParsePhysState(s string) (PhysState, error) {
	n, name, err := parseNumbered(s)
	if err != nil {
		return PhysState{}, fmt.Errorf("physical port state: %w", err)
	}
	if name == "" {
		name = physStateNames[n]
	}
	return PhysState{Num: n, Name: name}, nil
}

func parseNumbered(s string) (int, string, error) {
	s = strings.TrimSpace(s)
	numPart, name, _ := strings.Cut(s, ":")
	n, err := strconv.Atoi(strings.TrimSpace(numPart))
	if err != nil || n < 0 {
		return 0, "", fmt.Errorf("%q does not start with a state number", s)
	}
	return n, strings.TrimSpace(name), nil
}
