package config

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/google/go-cmp/cmp"
)

// confJSON builds a plugin configuration: a valid base (name, cniVersion,
// type) with the given top-level fields merged over it. A nil value
// deletes the key from the base.
func confJSON(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	m := map[string]any{"cniVersion": "1.1.0", "name": "ib-net", "type": "sriov-stable-cni"}
	for k, v := range fields {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal config: %v", err)
	}
	return b
}

func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *config.Error", err, err)
	}
	return ce.Field
}

func TestParseDefaults(t *testing.T) {
	conf, err := Parse(confJSON(t, nil), DefaultRoots())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	type view struct {
		AltName, LinkLayer, StateDir, SysfsRoot, LogFile, LogLevel string
		GUIDPolicy, PortPolicy                                     Policy
		PortWait                                                   time.Duration
		MTU                                                        int
		Level                                                      slog.Level
		PCIAddress, PCISource                                      string
	}
	got := view{conf.AltName, conf.LinkLayer, conf.StateDir, conf.SysfsRoot, conf.LogFile, conf.LogLevel,
		conf.GUIDPolicy, conf.PortPolicy, conf.PortWait(), conf.MTU, conf.Level, conf.PCIAddress, conf.PCISource}
	want := view{
		AltName: "vf-{pci}", LinkLayer: "auto", StateDir: "/run/cni/sriov-stable", SysfsRoot: "/sys",
		LogLevel: "info", GUIDPolicy: PolicyRequire, PortPolicy: PolicyRequire, PortWait: 5 * time.Second,
		Level: slog.LevelInfo,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestParseValid sets every field to each value it accepts and checks the
// parsed configuration carries it.
func TestParseValid(t *testing.T) {
	tests := []struct {
		name   string
		fields map[string]any
		check  func(*NetConf) any
		want   any
	}{
		{"linkLayer infiniband", map[string]any{"linkLayer": "infiniband"}, func(c *NetConf) any { return c.LinkLayer }, "infiniband"},
		{"linkLayer ethernet", map[string]any{"linkLayer": "ethernet"}, func(c *NetConf) any { return c.LinkLayer }, "ethernet"},
		{"linkLayer auto", map[string]any{"linkLayer": "auto"}, func(c *NetConf) any { return c.LinkLayer }, "auto"},
		{"guidPolicy require", map[string]any{"guidPolicy": "require"}, func(c *NetConf) any { return c.GUIDPolicy }, PolicyRequire},
		{"guidPolicy warn", map[string]any{"guidPolicy": "warn"}, func(c *NetConf) any { return c.GUIDPolicy }, PolicyWarn},
		{"guidPolicy ignore", map[string]any{"guidPolicy": "ignore"}, func(c *NetConf) any { return c.GUIDPolicy }, PolicyIgnore},
		{"portPolicy require", map[string]any{"portPolicy": "require"}, func(c *NetConf) any { return c.PortPolicy }, PolicyRequire},
		{"portPolicy warn", map[string]any{"portPolicy": "warn"}, func(c *NetConf) any { return c.PortPolicy }, PolicyWarn},
		{"portPolicy ignore", map[string]any{"portPolicy": "ignore"}, func(c *NetConf) any { return c.PortPolicy }, PolicyIgnore},
		{"portWaitMs 0", map[string]any{"portWaitMs": 0}, func(c *NetConf) any { return c.PortWait() }, time.Duration(0)},
		{"portWaitMs 250", map[string]any{"portWaitMs": 250}, func(c *NetConf) any { return c.PortWait() }, 250 * time.Millisecond},
		{"portWaitMs max", map[string]any{"portWaitMs": MaxPortWaitMs}, func(c *NetConf) any { return c.PortWait() }, 120 * time.Second},
		{"mtu 0 means unset", map[string]any{"mtu": 0}, func(c *NetConf) any { return c.MTU }, 0},
		{"mtu 4092", map[string]any{"mtu": 4092}, func(c *NetConf) any { return c.MTU }, 4092},
		{"mtu 65535", map[string]any{"mtu": 65535}, func(c *NetConf) any { return c.MTU }, 65535},
		{"stateDir", map[string]any{"stateDir": "/run/sriov-stable"}, func(c *NetConf) any { return c.StateDir }, "/run/sriov-stable"},
		{"sysfsRoot", map[string]any{"sysfsRoot": "/sys/"}, func(c *NetConf) any { return c.SysfsRoot }, "/sys"},
		{"logFile", map[string]any{"logFile": "/var/log/sriov-stable.log"}, func(c *NetConf) any { return c.LogFile }, "/var/log/sriov-stable.log"},
		{"logLevel error", map[string]any{"logLevel": "error"}, func(c *NetConf) any { return c.Level }, slog.LevelError},
		{"logLevel warn", map[string]any{"logLevel": "warn"}, func(c *NetConf) any { return c.Level }, slog.LevelWarn},
		{"logLevel info", map[string]any{"logLevel": "info"}, func(c *NetConf) any { return c.Level }, slog.LevelInfo},
		{"logLevel debug", map[string]any{"logLevel": "debug"}, func(c *NetConf) any { return c.Level }, slog.LevelDebug},
		{"altName all placeholders", map[string]any{"altName": "{pf}-vf{vf}-{pci}"}, func(c *NetConf) any { return c.AltName }, "{pf}-vf{vf}-{pci}"},
		{"altName literal", map[string]any{"altName": "ib-compute-0"}, func(c *NetConf) any { return c.AltName }, "ib-compute-0"},
		// 115 literal bytes + the 12 of {pci} is exactly the 127-byte limit.
		{"altName at the length limit", map[string]any{"altName": strings.Repeat("a", 115) + "{pci}"},
			func(c *NetConf) any { return len(c.AltName) }, 120},
		{"name with dots and dashes", map[string]any{"name": "ib.net-0_a"}, func(c *NetConf) any { return c.Name }, "ib.net-0_a"},
		{"name of 253 bytes", map[string]any{"name": strings.Repeat("n", 253)}, func(c *NetConf) any { return len(c.Name) }, 253},
		{"runtimeConfig CNIDeviceInfoFile", map[string]any{"runtimeConfig": map[string]any{"CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/x.json"}},
			func(c *NetConf) any { return c.RuntimeConfig.CNIDeviceInfoFile }, "/var/run/k8s.cni.cncf.io/devinfo/cni/x.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := Parse(confJSON(t, tc.fields), DefaultRoots())
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, tc.check(conf)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// badFieldCases are configurations Parse must reject, each with the field
// the error must name. ParseLenient must accept every one of them.
var badFieldCases = []struct {
	name   string
	fields map[string]any
	field  string
}{
	{"name missing", map[string]any{"name": nil}, "name"},
	{"name empty", map[string]any{"name": ""}, "name"},
	{"name with slash", map[string]any{"name": "a/b"}, "name"},
	{"name with backslash", map[string]any{"name": `a\b`}, "name"},
	{"name dot", map[string]any{"name": "."}, "name"},
	{"name dotdot", map[string]any{"name": ".."}, "name"},
	{"name traversal", map[string]any{"name": "../../etc"}, "name"},
	{"name with NUL", map[string]any{"name": "a\x00b"}, "name"},
	{"name with newline", map[string]any{"name": "a\nb"}, "name"},
	{"name with DEL", map[string]any{"name": "a\x7fb"}, "name"},
	{"name too long", map[string]any{"name": strings.Repeat("n", 254)}, "name"},

	{"linkLayer upper case", map[string]any{"linkLayer": "InfiniBand"}, "linkLayer"},
	{"linkLayer ib", map[string]any{"linkLayer": "ib"}, "linkLayer"},
	{"linkLayer eth", map[string]any{"linkLayer": "eth"}, "linkLayer"},
	{"linkLayer padded", map[string]any{"linkLayer": " auto"}, "linkLayer"},

	{"guidPolicy bad", map[string]any{"guidPolicy": "strict"}, "guidPolicy"},
	{"guidPolicy upper case", map[string]any{"guidPolicy": "Require"}, "guidPolicy"},
	{"portPolicy bad", map[string]any{"portPolicy": "wait"}, "portPolicy"},
	{"portPolicy upper case", map[string]any{"portPolicy": "IGNORE"}, "portPolicy"},

	{"portWaitMs negative", map[string]any{"portWaitMs": -1}, "portWaitMs"},
	{"portWaitMs above max", map[string]any{"portWaitMs": MaxPortWaitMs + 1}, "portWaitMs"},
	{"portWaitMs huge", map[string]any{"portWaitMs": 1 << 40}, "portWaitMs"},

	{"prevResult a string", map[string]any{"prevResult": "net1"}, "prevResult"},
	{"prevResult an array", map[string]any{"prevResult": []any{}}, "prevResult"},
	{"prevResult a number", map[string]any{"prevResult": 7}, "prevResult"},

	{"mtu negative", map[string]any{"mtu": -1}, "mtu"},
	{"mtu above 65535", map[string]any{"mtu": 65536}, "mtu"},

	{"stateDir relative", map[string]any{"stateDir": "var/lib/x"}, "stateDir"},
	{"stateDir dot-relative", map[string]any{"stateDir": "./state"}, "stateDir"},
	{"stateDir NUL", map[string]any{"stateDir": "/var/lib/\x00x"}, "stateDir"},
	{"stateDir root", map[string]any{"stateDir": "/"}, "stateDir"},
	{"stateDir too long", map[string]any{"stateDir": "/" + strings.Repeat("d", 4096)}, "stateDir"},
	{"sysfsRoot relative", map[string]any{"sysfsRoot": "sys"}, "sysfsRoot"},
	{"sysfsRoot NUL", map[string]any{"sysfsRoot": "/sys\x00"}, "sysfsRoot"},
	{"logFile relative", map[string]any{"logFile": "plugin.log"}, "logFile"},
	{"logFile NUL", map[string]any{"logFile": "/var/log/\x00.log"}, "logFile"},

	{"logLevel bad", map[string]any{"logLevel": "trace"}, "logLevel"},
	{"logLevel upper case", map[string]any{"logLevel": "INFO"}, "logLevel"},
	{"logLevel warning", map[string]any{"logLevel": "warning"}, "logLevel"},

	{"altName unknown placeholder", map[string]any{"altName": "vf-{netdev}"}, "altName"},
	{"altName upper-case placeholder", map[string]any{"altName": "vf-{PCI}"}, "altName"},
	{"altName empty placeholder", map[string]any{"altName": "vf-{}"}, "altName"},
	{"altName unclosed brace", map[string]any{"altName": "vf-{pci"}, "altName"},
	{"altName lone brace", map[string]any{"altName": "vf-{"}, "altName"},
	{"altName too long literal", map[string]any{"altName": strings.Repeat("a", 128)}, "altName"},
	{"altName too long expanded", map[string]any{"altName": strings.Repeat("a", 116) + "{pci}"}, "altName"},
	{"altName too long with vf", map[string]any{"altName": strings.Repeat("{vf}", 26)}, "altName"},
	{"altName slash", map[string]any{"altName": "vf/{pci}"}, "altName"},
	{"altName colon", map[string]any{"altName": "vf:{pci}"}, "altName"},
	{"altName space", map[string]any{"altName": "vf {pci}"}, "altName"},
	{"altName tab", map[string]any{"altName": "vf\t{pci}"}, "altName"},
	{"altName newline", map[string]any{"altName": "vf{pci}\n"}, "altName"},
	{"altName NBSP", map[string]any{"altName": "vf\u00a0{pci}"}, "altName"},
	{"altName dot", map[string]any{"altName": "."}, "altName"},
	{"altName dotdot", map[string]any{"altName": ".."}, "altName"},

	{"deviceID short", map[string]any{"deviceID": "18:00.2"}, "deviceID"},
	{"deviceID bus-only form", map[string]any{"deviceID": "0000:18:00"}, "deviceID"},
	{"deviceID bad hex", map[string]any{"deviceID": "0000:1g:00.2"}, "deviceID"},
	{"deviceID bad hex in domain", map[string]any{"deviceID": "000x:18:00.2"}, "deviceID"},
	{"deviceID sign", map[string]any{"deviceID": "0000:18:+0.2"}, "deviceID"},
	{"deviceID wrong separators", map[string]any{"deviceID": "0000.18.00:2"}, "deviceID"},
	{"deviceID dash form", map[string]any{"deviceID": "0000-18-00.2"}, "deviceID"},
	{"deviceID device above 1f", map[string]any{"deviceID": "0000:18:20.2"}, "deviceID"},
	{"deviceID device ff", map[string]any{"deviceID": "0000:18:ff.0"}, "deviceID"},
	{"deviceID function 8", map[string]any{"deviceID": "0000:18:00.8"}, "deviceID"},
	{"deviceID function f", map[string]any{"deviceID": "0000:18:00.f"}, "deviceID"},
	{"deviceID traversal", map[string]any{"deviceID": "../../etc"}, "deviceID"},
	{"deviceID traversal of right length", map[string]any{"deviceID": "../../etc/pa"}, "deviceID"},
	{"deviceID absolute path", map[string]any{"deviceID": "/etc/passwd"}, "deviceID"},
	{"deviceID NUL", map[string]any{"deviceID": "0000:18:00.\x00"}, "deviceID"},
	{"deviceID trailing newline", map[string]any{"deviceID": "0000:18:00.2\n"}, "deviceID"},
	{"deviceID padded", map[string]any{"deviceID": " 0000:18:00.2"}, "deviceID"},
	{"deviceID too long", map[string]any{"deviceID": "0000:18:00.2" + strings.Repeat("0", 500)}, "deviceID"},
	{"deviceID multibyte of right length", map[string]any{"deviceID": "00é:18:00.2"}, "deviceID"},
	{"pciBusID bad", map[string]any{"pciBusID": "0000:18:00.9"}, "pciBusID"},
	{"pciBusID traversal", map[string]any{"pciBusID": "../../../sys"}, "pciBusID"},
	{"runtimeConfig.deviceID bad", map[string]any{"runtimeConfig": map[string]any{"deviceID": "18:00.2"}}, "runtimeConfig.deviceID"},
	{"runtimeConfig.deviceID NUL", map[string]any{"runtimeConfig": map[string]any{"deviceID": "\x00000:18:00.2"}}, "runtimeConfig.deviceID"},
	{"deviceID bad wins over good pciBusID", map[string]any{"deviceID": "bad", "pciBusID": "0000:18:00.2"}, "deviceID"},
	{"pciBusID bad wins over good runtimeConfig.deviceID",
		map[string]any{"pciBusID": "bad", "runtimeConfig": map[string]any{"deviceID": "0000:18:00.2"}}, "pciBusID"},
	{"CNIDeviceInfoFile relative", map[string]any{"runtimeConfig": map[string]any{"CNIDeviceInfoFile": "devinfo.json"}},
		"runtimeConfig.CNIDeviceInfoFile"},
	{"CNIDeviceInfoFile traversal", map[string]any{"runtimeConfig": map[string]any{"CNIDeviceInfoFile": "../devinfo.json"}},
		"runtimeConfig.CNIDeviceInfoFile"},
}

func TestParseRejects(t *testing.T) {
	for _, tc := range badFieldCases {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := Parse(confJSON(t, tc.fields), DefaultRoots())
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", conf)
			}
			if got := fieldOf(t, err); got != tc.field {
				t.Errorf("error names field %q, want %q (error: %v)", got, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name %s", err, tc.field)
			}
		})
	}
}

// TestParseWrongJSONType checks a value of the wrong JSON type is refused
// with an error that names the field and the JSON value it got.
func TestParseWrongJSONType(t *testing.T) {
	tests := []struct {
		name   string
		fields map[string]any
		key    string
	}{
		{"mtu as string", map[string]any{"mtu": "9000"}, "mtu"},
		{"portWaitMs as string", map[string]any{"portWaitMs": "5000"}, "portWaitMs"},
		{"portWaitMs fractional", map[string]any{"portWaitMs": 1.5}, "portWaitMs"},
		{"linkLayer as number", map[string]any{"linkLayer": 1}, "linkLayer"},
		{"deviceID as number", map[string]any{"deviceID": 18}, "deviceID"},
		{"runtimeConfig as string", map[string]any{"runtimeConfig": "x"}, "runtimeConfig"},
		{"runtimeConfig.deviceID as number", map[string]any{"runtimeConfig": map[string]any{"deviceID": 18}}, "runtimeConfig.deviceID"},
		{"prevResult as array", map[string]any{"prevResult": []any{map[string]any{"name": "net1"}}}, "prevResult"},
		{"capabilities as array", map[string]any{"capabilities": []any{"deviceID"}}, "capabilities"},
		{"mtu of 5000 digits", map[string]any{"mtu": json.Number(strings.Repeat("9", 5000))}, "mtu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(confJSON(t, tc.fields), DefaultRoots())
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			if got := fieldOf(t, err); got != tc.key {
				t.Errorf("error names field %q, want %q (error: %v)", got, tc.key, err)
			}
			if !strings.Contains(err.Error(), "invalid "+tc.key+": got a JSON ") {
				t.Errorf("message %q does not say which JSON value %s got", err, tc.key)
			}
			if len(err.Error()) > 300 {
				t.Errorf("message is %d bytes long, want a bounded one", len(err.Error()))
			}
		})
	}
}

func TestParseNotJSON(t *testing.T) {
	for _, in := range []string{"", "{", "not json", `["a"]`, `"str"`, "42", `{"name": "x",}`} {
		if _, err := Parse([]byte(in), DefaultRoots()); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		}
		if _, err := ParseLenient([]byte(in), DefaultRoots()); err == nil {
			t.Errorf("ParseLenient(%q) succeeded", in)
		}
	}
}

func TestParsePCIPrecedence(t *testing.T) {
	rc := func(m map[string]any) map[string]any { return map[string]any{"runtimeConfig": m} }
	merge := func(ms ...map[string]any) map[string]any {
		out := map[string]any{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	tests := []struct {
		name               string
		fields             map[string]any
		wantAddr, wantFrom string
	}{
		{"none", nil, "", ""},
		{"deviceID", map[string]any{"deviceID": "0000:18:00.2"}, "0000:18:00.2", "deviceID"},
		{"pciBusID", map[string]any{"pciBusID": "0000:18:00.3"}, "0000:18:00.3", "pciBusID"},
		{"runtimeConfig.deviceID", rc(map[string]any{"deviceID": "0000:18:00.4"}), "0000:18:00.4", "runtimeConfig.deviceID"},
		{"deviceID over pciBusID", map[string]any{"deviceID": "0000:18:00.2", "pciBusID": "0000:18:00.3"}, "0000:18:00.2", "deviceID"},
		{"pciBusID over runtimeConfig.deviceID",
			merge(map[string]any{"pciBusID": "0000:18:00.3"}, rc(map[string]any{"deviceID": "0000:18:00.4"})), "0000:18:00.3", "pciBusID"},
		{"all three", merge(map[string]any{"deviceID": "0000:18:00.2", "pciBusID": "0000:18:00.3"},
			rc(map[string]any{"deviceID": "0000:18:00.4", "CNIDeviceInfoFile": "/run/k8s.cni.cncf.io/devinfo/d.json"})), "0000:18:00.2", "deviceID"},
		{"device info file left for the plugin", rc(map[string]any{"CNIDeviceInfoFile": "/run/k8s.cni.cncf.io/devinfo/d.json"}), "", ""},
		{"upper case normalized", map[string]any{"deviceID": "0000:AF:1F.7"}, "0000:af:1f.7", "deviceID"},
		{"mixed case domain", map[string]any{"pciBusID": "ABCD:0a:0B.0"}, "abcd:0a:0b.0", "pciBusID"},
		{"device 1f function 7", map[string]any{"deviceID": "ffff:ff:1f.7"}, "ffff:ff:1f.7", "deviceID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := Parse(confJSON(t, tc.fields), DefaultRoots())
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff([2]string{tc.wantAddr, tc.wantFrom}, [2]string{conf.PCIAddress, conf.PCISource}); diff != "" {
				t.Errorf("[address, source] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalizePCI(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"0000:18:00.2", "0000:18:00.2", true},
		{"0000:18:00.0", "0000:18:00.0", true},
		{"0000:C0:1F.7", "0000:c0:1f.7", true},
		{"FFFF:FF:00.0", "ffff:ff:00.0", true},
		{"0000:18:1f.7", "0000:18:1f.7", true},
		{"0000:18:20.0", "", false},
		{"0000:18:00.8", "", false},
		{"0000:18:00.a", "", false},
		{"0000:18:00", "", false},
		{"18:00.2", "", false},
		{"00000:18:00.2", "", false},
		{"0000:18:00.2 ", "", false},
		{"0000:g8:00.2", "", false},
		{"0000:18:00:2", "", false},
		{"0000/18/00.2", "", false},
		{"..:..:..../", "", false},
		{"", "", false},
		{"\x00\x00\x00\x00:\x00\x00:\x00\x00.\x00", "", false},
	}
	for _, tc := range tests {
		got, err := NormalizePCI("deviceID", tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("NormalizePCI(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && fieldOf(t, err) != "deviceID" {
			t.Errorf("NormalizePCI(%q) error names %q, want the field passed in", tc.in, fieldOf(t, err))
		}
	}
	// The message must not echo an unbounded input.
	_, err := NormalizePCI("pciBusID", strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("long input: error %d bytes long, want a bounded message", len(err.Error()))
	}
}

// TestParseLenient checks DEL's parse keeps going on every field ADD
// rejects, and falls back to safe defaults for the ones it cannot use.
func TestParseLenient(t *testing.T) {
	for _, tc := range badFieldCases {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := ParseLenient(confJSON(t, tc.fields), DefaultRoots())
			if err != nil {
				t.Fatalf("ParseLenient: %v", err)
			}
			for _, p := range []struct{ field, val string }{{"stateDir", conf.StateDir}, {"sysfsRoot", conf.SysfsRoot}} {
				if !strings.HasPrefix(p.val, "/") || strings.ContainsRune(p.val, 0) || p.val == "/" && p.field == "stateDir" {
					t.Errorf("%s = %q, want a usable absolute path", p.field, p.val)
				}
			}
			if conf.LogFile != "" && (!strings.HasPrefix(conf.LogFile, "/") || strings.ContainsRune(conf.LogFile, 0)) {
				t.Errorf("logFile = %q, want empty or a usable absolute path", conf.LogFile)
			}
			if conf.PCIAddress != "" {
				if _, err := NormalizePCI("x", conf.PCIAddress); err != nil {
					t.Errorf("PCIAddress %q is not valid: %v", conf.PCIAddress, err)
				}
			}
		})
	}
}

func TestParseLenientKeepsWhatItCan(t *testing.T) {
	tests := []struct {
		name                           string
		fields                         map[string]any
		stateDir, sysfsRoot, pci, from string
		level                          slog.Level
	}{
		{"bad linkLayer keeps the rest",
			map[string]any{"linkLayer": "x", "stateDir": "/run/custom", "deviceID": "0000:18:00.2", "logLevel": "debug"},
			"/run/custom", "/sys", "0000:18:00.2", "deviceID", slog.LevelDebug},
		{"bad logLevel falls back to info",
			map[string]any{"logLevel": "loud", "stateDir": "/run/custom"}, "/run/custom", "/sys", "", "", slog.LevelInfo},
		{"a bad path falls back to its default, a good one stays",
			map[string]any{"stateDir": "rel", "sysfsRoot": "/sys/x"}, DefaultStateDir, "/sys/x", "", "", slog.LevelInfo},
		{"a path outside the roots falls back to its default",
			map[string]any{"stateDir": "/run/custom", "sysfsRoot": "/proc"}, "/run/custom", DefaultSysfsRoot, "", "", slog.LevelInfo},
		{"bad deviceID leaves the address unresolved",
			map[string]any{"deviceID": "../x", "stateDir": "/run/custom"}, "/run/custom", "/sys", "", "", slog.LevelInfo},
		{"bad altName keeps the rest",
			map[string]any{"altName": "{x}", "pciBusID": "0000:18:00.3", "stateDir": "/run/custom"},
			"/run/custom", "/sys", "0000:18:00.3", "pciBusID", slog.LevelInfo},
		// A field of the wrong JSON type must not cost DEL the fields that
		// tell it where the record is and which VF to hand back.
		{"wrong-typed mtu keeps stateDir and deviceID",
			map[string]any{"mtu": "9000", "stateDir": "/run/custom", "deviceID": "0000:18:00.2"},
			"/run/custom", "/sys", "0000:18:00.2", "deviceID", slog.LevelInfo},
		// encoding/json matches keys regardless of case: so must the skipping.
		{"wrong-typed MTU in another case keeps the rest",
			map[string]any{"MTU": "9000", "PrevResult": 3, "stateDir": "/run/custom", "deviceID": "0000:18:00.2"},
			"/run/custom", "/sys", "0000:18:00.2", "deviceID", slog.LevelInfo},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := ParseLenient(confJSON(t, tc.fields), DefaultRoots())
			if err != nil {
				t.Fatalf("ParseLenient: %v", err)
			}
			type view struct {
				StateDir, SysfsRoot, PCI, From string
				Level                          slog.Level
			}
			want := view{tc.stateDir, tc.sysfsRoot, tc.pci, tc.from, tc.level}
			got := view{conf.StateDir, conf.SysfsRoot, conf.PCIAddress, conf.PCISource, conf.Level}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if conf.Name != "ib-net" {
				t.Errorf("name = %q, want ib-net", conf.Name)
			}
		})
	}
}

func TestValidateKeyPart(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"abc", true},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true},
		{"a.b", true},
		{"a_b-c%d", true},
		{".hidden", true},
		{strings.Repeat("x", 253), true},
		{"", false},
		{strings.Repeat("x", 254), false},
		{".", false},
		{"..", false},
		{"a..b", false},
		{"../x", false},
		{"a/b", false},
		{`a\b`, false},
		{"/abs", false},
		{"a\x00b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x1fb", false},
		{"a\x7fb", false},
	}
	for _, tc := range tests {
		err := ValidateKeyPart("CNI_CONTAINERID", tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateKeyPart(%q) = %v, want ok=%v", truncate(tc.in, 20), err, tc.ok)
			continue
		}
		if err != nil && fieldOf(t, err) != "CNI_CONTAINERID" {
			t.Errorf("ValidateKeyPart(%q) names field %q", tc.in, fieldOf(t, err))
		}
	}
}

func TestHasPrevResult(t *testing.T) {
	for _, tc := range []struct {
		stdin string
		want  bool
	}{
		{`{"cniVersion":"1.1.0","name":"n","type":"t","deviceID":"0000:18:00.2"}`, false},
		{`{"cniVersion":"1.1.0","name":"n","type":"t","deviceID":"0000:18:00.2","prevResult":null}`, false},
		{`{"cniVersion":"1.1.0","name":"n","type":"t","deviceID":"0000:18:00.2","prevResult":{}}`, true},
		{`{"cniVersion":"1.1.0","name":"n","type":"t","deviceID":"0000:18:00.2","prevResult":{"interfaces":[{"name":"net1"}]}}`, true},
	} {
		conf, err := Parse([]byte(tc.stdin), DefaultRoots())
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.stdin, err)
		}
		if got := conf.HasPrevResult(); got != tc.want {
			t.Errorf("Parse(%s).HasPrevResult() = %v, want %v", tc.stdin, got, tc.want)
		}
		// version.ParsePrevResult moves it from RawPrevResult to PrevResult.
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			t.Fatalf("ParsePrevResult(%s): %v", tc.stdin, err)
		}
		if got := conf.HasPrevResult(); got != tc.want {
			t.Errorf("after ParsePrevResult, HasPrevResult() = %v, want %v", got, tc.want)
		}
	}
}
