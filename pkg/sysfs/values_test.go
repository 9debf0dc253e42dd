package sysfs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGUID(t *testing.T) {
	tests := []struct {
		in   string
		want GUID
		ok   bool
	}{
		{"a088:c203:0018:1000", 0xa088c20300181000, true},     // sysfs
		{"a0:88:c2:03:00:18:10:00", 0xa088c20300181000, true}, // iproute2
		{"a088c20300181000", 0xa088c20300181000, true},        // bare
		{"A088:C203:0018:1000", 0xa088c20300181000, true},     // upper case
		{"a088:c203:0018:1000\n", 0xa088c20300181000, true},   // as read from sysfs
		{"  0000:0000:0000:0001  ", 1, true},                  // padded
		{"0000:0000:0000:0000", GUIDZero, true},               // unassigned
		{"ffff:ffff:ffff:ffff", GUIDAllOnes, true},            // unassigned (firmware)
		{"", 0, false},                                        // empty
		{"a088:c203:0018", 0, false},                          // 12 digits
		{"a088:c203:0018:1000:00", 0, false},                  // 18 digits
		{"a088:c203:0018:100g", 0, false},                     // non-hex
		{"0xa088c20300181000", 0, false},                      // 0x prefix
		{"a088-c203-0018-1000", 0, false},                     // dashes
		{"a088 c203 0018 1000", 0, false},                     // spaces
		{"a088:c203:0018:-100", 0, false},                     // sign
		{"ｆｆｆｆ:ffff:ffff:ffff", 0, false},                     // full-width digits
		{"fe80:0000:0000:0000:a088:c203:0018:1000", 0, false}, // a GID, not a GUID
	}
	for _, tc := range tests {
		got, err := ParseGUID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseGUID(%q) = %#x, %v; want %#x, ok=%v", tc.in, uint64(got), err, uint64(tc.want), tc.ok)
		}
	}
}

func TestGUIDFormats(t *testing.T) {
	tests := []struct {
		g            GUID
		sysfs, colon string
		valid        bool
	}{
		{0xa088c20300181000, "a088:c203:0018:1000", "a0:88:c2:03:00:18:10:00", true},
		{1, "0000:0000:0000:0001", "00:00:00:00:00:00:00:01", true},
		{GUIDZero, "0000:0000:0000:0000", "00:00:00:00:00:00:00:00", false},
		{GUIDAllOnes, "ffff:ffff:ffff:ffff", "ff:ff:ff:ff:ff:ff:ff:ff", false},
		{0xfffffffffffffffe, "ffff:ffff:ffff:fffe", "ff:ff:ff:ff:ff:ff:ff:fe", true},
	}
	for _, tc := range tests {
		got := [3]any{tc.g.String(), tc.g.Colon(), tc.g.Valid()}
		if diff := cmp.Diff([3]any{tc.sysfs, tc.colon, tc.valid}, got); diff != "" {
			t.Errorf("GUID %#x [String, Colon, Valid] (-want +got):\n%s", uint64(tc.g), diff)
		}
		// Both forms read back to the same GUID.
		for _, s := range []string{tc.g.String(), tc.g.Colon()} {
			if back, err := ParseGUID(s); err != nil || back != tc.g {
				t.Errorf("ParseGUID(%q) = %#x, %v; want %#x", s, uint64(back), err, uint64(tc.g))
			}
		}
	}
}

func TestParsePortState(t *testing.T) {
	tests := []struct {
		in   string
		want PortState
		ok   bool
	}{
		{"1: DOWN", PortState{PortDown, "DOWN"}, true},
		{"2: INIT", PortState{PortInit, "INIT"}, true},
		{"3: ARMED", PortState{PortArmed, "ARMED"}, true},
		{"4: ACTIVE", PortState{PortActive, "ACTIVE"}, true},
		{"5: ACTIVE_DEFER", PortState{PortActiveDefer, "ACTIVE_DEFER"}, true},
		// Without names the kernel's names are filled in.
		{"1", PortState{PortDown, "DOWN"}, true},
		{"2", PortState{PortInit, "INIT"}, true},
		{"3", PortState{PortArmed, "ARMED"}, true},
		{"4", PortState{PortActive, "ACTIVE"}, true},
		{"5", PortState{PortActiveDefer, "ACTIVE_DEFER"}, true},
		{"4:", PortState{PortActive, "ACTIVE"}, true},
		// Whitespace as sysfs and humans leave it.
		{"4: ACTIVE\n", PortState{PortActive, "ACTIVE"}, true},
		{"  4 :  ACTIVE  \n", PortState{PortActive, "ACTIVE"}, true},
		{"\t1:DOWN\r\n", PortState{PortDown, "DOWN"}, true},
		// Unknown numbers are kept with whatever name the kernel gave.
		{"0: NOP", PortState{0, "NOP"}, true},
		{"9: FUTURE", PortState{9, "FUTURE"}, true},
		{"9", PortState{9, ""}, true},
		{"", PortState{}, false},
		{"ACTIVE", PortState{}, false},
		{": ACTIVE", PortState{}, false},
		{"-1: DOWN", PortState{}, false},
		{"four: ACTIVE", PortState{}, false},
		{"4x: ACTIVE", PortState{}, false},
		{"0x4: ACTIVE", PortState{}, false},
		{"\x00", PortState{}, false},
	}
	for _, tc := range tests {
		got, err := ParsePortState(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParsePortState(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParsePortState(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParsePhysState(t *testing.T) {
	tests := []struct {
		in   string
		want PhysState
		ok   bool
	}{
		{"1: Sleep", PhysState{PhysSleep, "Sleep"}, true},
		{"2: Polling", PhysState{PhysPolling, "Polling"}, true},
		{"3: Disabled", PhysState{PhysDisabled, "Disabled"}, true},
		{"4: PortConfigurationTraining", PhysState{PhysPortConfigTrain, "PortConfigurationTraining"}, true},
		{"5: LinkUp", PhysState{PhysLinkUp, "LinkUp"}, true},
		{"6: LinkErrorRecovery", PhysState{PhysLinkErrorRecovery, "LinkErrorRecovery"}, true},
		{"7: Phy Test", PhysState{PhysPhyTest, "Phy Test"}, true},
		{"1", PhysState{PhysSleep, "Sleep"}, true},
		{"2", PhysState{PhysPolling, "Polling"}, true},
		{"3", PhysState{PhysDisabled, "Disabled"}, true},
		{"4", PhysState{PhysPortConfigTrain, "PortConfigurationTraining"}, true},
		{"5", PhysState{PhysLinkUp, "LinkUp"}, true},
		{"6", PhysState{PhysLinkErrorRecovery, "LinkErrorRecovery"}, true},
		{"7", PhysState{PhysPhyTest, "Phy Test"}, true},
		{"5: LinkUp\n", PhysState{PhysLinkUp, "LinkUp"}, true},
		{" 7 : Phy Test \n", PhysState{PhysPhyTest, "Phy Test"}, true},
		{"0: NoStateChange", PhysState{0, "NoStateChange"}, true},
		{"8: Unknown", PhysState{8, "Unknown"}, true},
		{"42", PhysState{42, ""}, true},
		{"", PhysState{}, false},
		{"LinkUp", PhysState{}, false},
		{"-5: LinkUp", PhysState{}, false},
		{"5.0: LinkUp", PhysState{}, false},
		{"garbage\n", PhysState{}, false},
	}
	for _, tc := range tests {
		got, err := ParsePhysState(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParsePhysState(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParsePhysState(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestStateStrings(t *testing.T) {
	if got := (PortState{4, "ACTIVE"}).String(); got != "4: ACTIVE" {
		t.Errorf("PortState.String = %q", got)
	}
	if got := (PhysState{7, "Phy Test"}).String(); got != "7: Phy Test" {
		t.Errorf("PhysState.String = %q", got)
	}
}

// TestPortActive walks every logical × physical state: only ACTIVE with
// LinkUp passes traffic.
func TestPortActive(t *testing.T) {
	for s := 0; s <= 6; s++ {
		for ps := 0; ps <= 8; ps++ {
			p := Port{Num: 1, State: PortState{Num: s}, PhysState: PhysState{Num: ps}}
			want := s == PortActive && ps == PhysLinkUp
			if got := p.Active(); got != want {
				t.Errorf("Port{state %d, phys %d}.Active() = %v, want %v", s, ps, got, want)
			}
		}
	}
}
