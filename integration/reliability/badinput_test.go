package reliability_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

// badEnv is the node the corpus runs against: a VF placed in a pod under a
// name ADD would repair, and a temp root holding everything a case may name
// (state dir, working dir, files to point at), all snapshotted.
type badEnv struct {
	*node
	root, files, readOnly string
	pod                   ns.NetNS
	mac                   string
}

// noPF is a PCI function in the fixture with no physfn: {pf} cannot expand.
const noPF = "0000:19:00.0"

func newBadEnv(t *testing.T) *badEnv {
	nd := newNode(t, 1, false)
	e := &badEnv{node: nd, root: t.TempDir()}
	e.stateDir = filepath.Join(e.root, "state")
	e.files = filepath.Join(e.root, "files")
	e.readOnly = filepath.Join(e.root, "ro")
	for _, d := range []string{e.files, e.readOnly, filepath.Join(e.root, "cwd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(e.files, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("regular", "not a directory\n")
	write("devinfo-tricky.json", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"../../../etc"}}`)
	write("devinfo-net.json", `{"type":"net","version":"1.1.0","pci":{"pci-address":"0000:18:00.2"}}`)
	write("devinfo-huge.json", `{"type":"pci","pad":"`+strings.Repeat("x", 70<<10)+`"}`)
	// A read-only state dir: root is not stopped by mode bits, a read-only
	// mount stops everyone (this mount namespace only).
	if err := unix.Mount("tmpfs", e.readOnly, "tmpfs", unix.MS_RDONLY, "mode=755"); err != nil {
		t.Fatalf("mount read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(e.readOnly, unix.MNT_DETACH) })
	e.sys.AddDevice(noPF, sysfstest.Device{})
	e.pod = testutil.NewNetns(t)
	l := placeInPod(t, nd.vfs[0], e.pod, "eth7", true)
	e.mac = l.Attrs().HardwareAddr.String()
	return e
}

// base is a configuration ADD accepts, as libcni would send it.
func (e *badEnv) base() map[string]any {
	return map[string]any{
		"cniVersion": "1.1.0", "name": network, "type": ours,
		"deviceID": testutil.VFAddr(0), "pciBusID": testutil.VFAddr(0),
		"sysfsRoot": e.sys.Root, "stateDir": e.stateDir, "portWaitMs": 300,
		"prevResult": prevFor(e.pod, "net1", e.mac),
	}
}

// with is base with fields replaced (nil deletes), as JSON.
func with(fields map[string]any) func(e *badEnv) []byte {
	return func(e *badEnv) []byte {
		m := e.base()
		for k, v := range fields {
			if v == nil {
				delete(m, k)
				continue
			}
			m[k] = v
		}
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		return b
	}
}

// withf is with for fields that name the env's paths.
func withf(f func(e *badEnv) map[string]any) func(e *badEnv) []byte {
	return func(e *badEnv) []byte { return with(f(e))(e) }
}

// raw is a literal stdin.
func raw(s string) func(*badEnv) []byte { return func(*badEnv) []byte { return []byte(s) } }

// rawBase is base with its closing brace replaced by extra text.
func rawBase(tail string) func(*badEnv) []byte {
	return func(e *badEnv) []byte {
		b := with(nil)(e)
		return append(b[:len(b)-1], tail...)
	}
}

type badCase struct {
	name  string
	cmd   string // default ADD
	stdin func(e *badEnv) []byte
	env   func(e *badEnv) []string // CNI_* overrides
	code  uint
	msg   string // in the error's msg or details
	// delCode is what DEL with the same input answers: 0 (it cleans up
	// whatever it can) unless the input is not a CNI call at all.
	delCode uint
}

func envs(kv ...string) func(*badEnv) []string { return func(*badEnv) []string { return kv } }

func badCases() []badCase {
	long := strings.Repeat("a", 4096)
	return []badCase{
		// Malformed JSON: skel rejects it before the plugin runs.
		{name: "empty stdin", stdin: raw(""), code: 6, msg: "unexpected end of JSON input", delCode: 6},
		{name: "not JSON", stdin: raw("cniVersion=1.1.0 name=vfnet"), code: 6, msg: "invalid character", delCode: 6},
		{name: "truncated JSON", stdin: raw(`{"cniVersion":"1.1.0","name":"vfnet","type":"sriov-stable-cni","deviceID":"0000:18`), code: 6, msg: "unexpected end of JSON input", delCode: 6},
		{name: "JSON array", stdin: raw(`[{"name":"vfnet"}]`), code: 6, msg: "cannot unmarshal array", delCode: 6},
		{name: "JSON null", stdin: raw(`null`), code: 7, msg: "missing network name", delCode: 7},
		{name: "trailing garbage", stdin: rawBase(`} {"deviceID":"../x"}`), code: 6, msg: "invalid character '{' after top-level value", delCode: 6},
		{name: "nested 20000 deep", stdin: rawBase(`,"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`), code: 6, msg: "exceeded max depth", delCode: 6},

		// Wrong JSON types.
		{name: "name is a number", stdin: with(map[string]any{"name": 7}), code: 6, msg: "cannot unmarshal number", delCode: 6},
		{name: "cniVersion is a number", stdin: with(map[string]any{"cniVersion": 1.1}), code: 6, msg: "cannot unmarshal number", delCode: 6},
		{name: "portWaitMs is a string", stdin: with(map[string]any{"portWaitMs": "300"}), code: 7, msg: "portWaitMs"},
		{name: "mtu is a string", stdin: with(map[string]any{"mtu": "9000"}), code: 7, msg: "mtu"},
		{name: "deviceID is a number", stdin: with(map[string]any{"deviceID": 18}), code: 7, msg: "deviceID"},
		{name: "runtimeConfig is a string", stdin: with(map[string]any{"runtimeConfig": "deviceID=0000:18:00.2"}), code: 7, msg: "runtimeConfig"},
		{name: "guidPolicy is a bool", stdin: with(map[string]any{"guidPolicy": true}), code: 7, msg: "guidPolicy"},
		{name: "prevResult is a string", stdin: with(map[string]any{"prevResult": "net1"}), code: 7, msg: "prevResult"},

		// Unknown policy and enum values, out-of-range numbers.
		{name: "guidPolicy maybe", stdin: with(map[string]any{"guidPolicy": "maybe"}), code: 7, msg: `invalid guidPolicy: "maybe" is not one of require, warn, ignore`},
		{name: "portPolicy in capitals", stdin: with(map[string]any{"portPolicy": "Require"}), code: 7, msg: `invalid portPolicy: "Require" is not one of`},
		{name: "linkLayer ib", stdin: with(map[string]any{"linkLayer": "ib"}), code: 7, msg: `invalid linkLayer: "ib" is not one of infiniband, ethernet, auto`},
		{name: "logLevel trace", stdin: with(map[string]any{"logLevel": "trace"}), code: 7, msg: `invalid logLevel: "trace"`},
		{name: "portWaitMs too large", stdin: with(map[string]any{"portWaitMs": 10_000_000}), code: 7, msg: "invalid portWaitMs: 10000000 is outside 0..120000"},
		{name: "portWaitMs negative", stdin: with(map[string]any{"portWaitMs": -5}), code: 7, msg: "invalid portWaitMs: -5 is outside"},
		{name: "mtu too large", stdin: with(map[string]any{"mtu": 70000}), code: 7, msg: "invalid mtu: 70000 is outside 0..65535"},

		// prevResult missing or garbage, per version.
		{name: "no prevResult 1.1.0", stdin: with(map[string]any{"prevResult": nil}), code: 7, msg: "must be chained after"},
		{name: "no prevResult 0.3.1", stdin: with(map[string]any{"prevResult": nil, "cniVersion": "0.3.1"}), code: 7, msg: "must be chained after"},
		{name: "garbage prevResult 1.1.0", stdin: with(map[string]any{"prevResult": map[string]any{"interfaces": "net1"}}), code: 6, msg: "cannot read prevResult (cniVersion 1.1.0)"},
		{name: "garbage prevResult 1.0.0", stdin: with(map[string]any{"cniVersion": "1.0.0", "prevResult": map[string]any{"ips": []any{map[string]any{"address": "10.0.0.300/24"}}}}), code: 6, msg: "cannot read prevResult (cniVersion 1.0.0)"},
		{name: "garbage prevResult 0.4.0", stdin: with(map[string]any{"cniVersion": "0.4.0", "prevResult": map[string]any{"ips": []any{map[string]any{"version": "4", "address": "nonsense"}}}}), code: 6, msg: "cannot read prevResult (cniVersion 0.4.0)"},
		{name: "garbage prevResult 0.3.0", stdin: with(map[string]any{"cniVersion": "0.3.0", "prevResult": map[string]any{"dns": "8.8.8.8"}}), code: 6, msg: "cannot read prevResult (cniVersion 0.3.0)"},
		{name: "empty prevResult and no address", stdin: with(map[string]any{"prevResult": map[string]any{}, "deviceID": nil, "pciBusID": nil}), code: 7, msg: "no PCI address"},
		{name: "prevResult pciID with a path", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"deviceID": nil, "pciBusID": nil, "prevResult": map[string]any{"cniVersion": "1.1.0",
				"interfaces": []any{map[string]any{"name": "net1", "sandbox": e.pod.Path(), "pciID": "../../devices/0000:18:00.2"}}}}
		}), code: 7, msg: "invalid prevResult pciID"},

		// deviceID and friends with path tricks.
		{name: "deviceID ../", stdin: with(map[string]any{"deviceID": "../../../etc"}), code: 7, msg: `invalid deviceID: "../../../etc" is not a PCI address`},
		{name: "deviceID absolute", stdin: with(map[string]any{"deviceID": "/etc/passwd"}), code: 7, msg: "invalid deviceID"},
		{name: "deviceID with NUL", stdin: with(map[string]any{"deviceID": "0000:18:00.\x00"}), code: 7, msg: "invalid deviceID"},
		{name: "deviceID 4096 bytes", stdin: with(map[string]any{"deviceID": long}), code: 7, msg: "invalid deviceID"},
		{name: "deviceID right shape, path inside", stdin: with(map[string]any{"deviceID": "../.:18:00.2"}), code: 7, msg: "non-hex digit"},
		{name: "pciBusID with a path", stdin: with(map[string]any{"deviceID": nil, "pciBusID": "0000:18:00.2/../../.."}), code: 7, msg: "invalid pciBusID"},
		{name: "runtimeConfig.deviceID with backslashes", stdin: with(map[string]any{"deviceID": nil, "pciBusID": nil,
			"runtimeConfig": map[string]any{"deviceID": `..\..\0000`}}), code: 7, msg: "invalid runtimeConfig.deviceID"},
		{name: "device info file relative", stdin: with(map[string]any{"deviceID": nil, "pciBusID": nil,
			"runtimeConfig": map[string]any{"CNIDeviceInfoFile": "../devinfo.json"}}), code: 7, msg: "is not an absolute path"},
		{name: "device info file is a directory", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"deviceID": nil, "pciBusID": nil, "runtimeConfig": map[string]any{"CNIDeviceInfoFile": e.files}}
		}), code: 7, msg: "is a directory"},
		{name: "device info file with a path as address", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"deviceID": nil, "pciBusID": nil,
				"runtimeConfig": map[string]any{"CNIDeviceInfoFile": filepath.Join(e.files, "devinfo-tricky.json")}}
		}), code: 7, msg: "pci.pci-address"},
		{name: "device info file of a net device", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"deviceID": nil, "pciBusID": nil,
				"runtimeConfig": map[string]any{"CNIDeviceInfoFile": filepath.Join(e.files, "devinfo-net.json")}}
		}), code: 7, msg: `describes a "net" device`},
		{name: "device info file huge", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"deviceID": nil, "pciBusID": nil,
				"runtimeConfig": map[string]any{"CNIDeviceInfoFile": filepath.Join(e.files, "devinfo-huge.json")}}
		}), code: 7, msg: "larger than 64 KiB"},
		{name: "device info file is /dev/zero", stdin: with(map[string]any{"deviceID": nil, "pciBusID": nil,
			"runtimeConfig": map[string]any{"CNIDeviceInfoFile": "/dev/zero"}}), code: 7, msg: `runtimeConfig.CNIDeviceInfoFile: "/dev/zero" is outside the allowed roots`},
		{name: "VF not in sysfs", stdin: with(map[string]any{"deviceID": "0000:5E:00.3"}), code: 100, msg: "VF 0000:5e:00.3: no such PCI device"},

		// CNI_IFNAME.
		{name: "ifname 16 bytes", env: envs("CNI_IFNAME=net1234567890123"), code: 4, msg: "interface name is too long", delCode: 4},
		{name: "ifname with /", env: envs("CNI_IFNAME=net/1"), code: 4, msg: "contains / or :", delCode: 4},
		{name: "ifname empty", env: envs("CNI_IFNAME="), code: 4, msg: "[CNI_IFNAME] missing", delCode: 4},
		{name: "ifname ..", env: envs("CNI_IFNAME=.."), code: 4, msg: "interface name is . or ..", delCode: 4},
		{name: "ifname not ASCII", env: envs("CNI_IFNAME=nét1"), code: 4, msg: "CNI_IFNAME is not a valid interface name"},

		// CNI_CONTAINERID.
		{name: "containerID with /", env: envs("CNI_CONTAINERID=abc/../../etc"), code: 4, msg: "invalid characters in containerID", delCode: 4},
		{name: "containerID ..", env: envs("CNI_CONTAINERID=.."), code: 4, msg: "invalid characters in containerID", delCode: 4},
		{name: "containerID with ..", env: envs("CNI_CONTAINERID=abc..def"), code: 4, msg: `invalid CNI_CONTAINERID: "abc..def" contains '..'`},
		{name: "containerID 300 bytes", env: envs("CNI_CONTAINERID=" + strings.Repeat("c", 300)), code: 4, msg: "invalid CNI_CONTAINERID: longer than 253 bytes"},
		{name: "containerID empty", env: envs("CNI_CONTAINERID="), code: 4, msg: "[CNI_CONTAINERID] missing", delCode: 4},

		// Network name.
		{name: "network name ..", stdin: with(map[string]any{"name": ".."}), code: 7, msg: "invalid characters found in network name", delCode: 7},
		{name: "network name with ..", stdin: with(map[string]any{"name": "a..b"}), code: 7, msg: `invalid name: "a..b" contains '..'`},
		{name: "network name with /", stdin: with(map[string]any{"name": "a/b"}), code: 7, msg: "invalid characters found in network name", delCode: 7},
		{name: "network name empty", stdin: with(map[string]any{"name": ""}), code: 7, msg: "missing network name", delCode: 7},

		// Huge configurations.
		{name: "8 MiB of padding", stdin: with(map[string]any{"pad": strings.Repeat("p", 8<<20), "deviceID": "../x"}), code: 7, msg: "invalid deviceID"},
		{name: "1 MiB network name", stdin: with(map[string]any{"name": strings.Repeat("n", 1<<20)}), code: 7, msg: "invalid name: longer than 253 bytes"},
		{name: "1 MiB altName", stdin: with(map[string]any{"altName": strings.Repeat("{pci}", 1<<18)}), code: 7, msg: "longer than 127 bytes"},
		{name: "100000 prevResult interfaces", stdin: withf(func(e *badEnv) map[string]any {
			ifs := make([]any, 100000)
			for i := range ifs {
				ifs[i] = map[string]any{"name": fmt.Sprintf("x%d", i), "sandbox": "/elsewhere"}
			}
			return map[string]any{"prevResult": map[string]any{"cniVersion": "1.1.0", "interfaces": ifs}, "linkLayer": "ib"}
		}), code: 7, msg: "invalid linkLayer"},

		// altName templates that give illegal names.
		{name: "altName with /", stdin: with(map[string]any{"altName": "vf/{pci}"}), code: 7, msg: "invalid altName"},
		{name: "altName over 127 bytes", stdin: with(map[string]any{"altName": strings.Repeat("{pci}", 11)}), code: 7, msg: "longer than 127 bytes"},
		{name: "altName with a space", stdin: with(map[string]any{"altName": "vf {pci}"}), code: 7, msg: "whitespace"},
		{name: "altName with :", stdin: with(map[string]any{"altName": "vf:{vf}"}), code: 7, msg: "invalid altName"},
		{name: "altName not ASCII", stdin: with(map[string]any{"altName": "vf-é{pci}"}), code: 7, msg: "non-ASCII"},
		{name: "altName invalid UTF-8", stdin: rawBase(`,"altName":"vf-` + "\xff" + `{pci}"}`), code: 7, msg: "invalid altName"},
		{name: "altName ..", stdin: with(map[string]any{"altName": ".."}), code: 7, msg: "which the kernel rejects"},
		{name: "altName unknown placeholder", stdin: with(map[string]any{"altName": "vf-{bus}"}), code: 7, msg: "unknown placeholder {bus}"},
		{name: "altName unclosed", stdin: with(map[string]any{"altName": "vf-{pci"}), code: 7, msg: "unclosed '{'"},
		{name: "altName {pf} on a function without PF", stdin: with(map[string]any{"altName": "pf-{pf}", "deviceID": noPF, "pciBusID": noPF}),
			code: 7, msg: "uses {pf} but VF 0000:19:00.0 has no PF"},

		// sysfsRoot.
		{name: "sysfsRoot is a file", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"sysfsRoot": filepath.Join(e.files, "regular")}
		}), code: 5, msg: "not a directory"},
		{name: "sysfsRoot relative", stdin: with(map[string]any{"sysfsRoot": "sys"}), code: 7, msg: `invalid sysfsRoot: "sys" is not an absolute path`},
		{name: "sysfsRoot missing", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"sysfsRoot": filepath.Join(e.root, "nonexistent", "sys")}
		}), code: 100, msg: "no such PCI device under /"},
		{name: "sysfsRoot with NUL", stdin: with(map[string]any{"sysfsRoot": "/sys\x00/x"}), code: 7, msg: "invalid sysfsRoot"},

		// stateDir and logFile.
		{name: "stateDir under a file", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"stateDir": filepath.Join(e.files, "regular", "state")}
		}), code: 5, msg: "not a directory"},
		{name: "stateDir read-only", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"stateDir": filepath.Join(e.readOnly, "state")}
		}), code: 5, msg: "read-only file system"},
		{name: "stateDir /", stdin: with(map[string]any{"stateDir": "/"}), code: 7, msg: "refusing to use / as the state directory"},
		{name: "stateDir relative", stdin: with(map[string]any{"stateDir": "state"}), code: 7, msg: `invalid stateDir: "state" is not an absolute path`},
		{name: "logFile relative", stdin: with(map[string]any{"logFile": "plugin.log"}), code: 7, msg: `invalid logFile: "plugin.log" is not an absolute path`},

		// Paths outside the allowed roots (issue 24 A8). /var/lib is a private
		// tmpfs here and snapshotted: a plugin that honoured them would
		// show up as a write outside the state dir.
		{name: "stateDir outside the allowed roots", stdin: with(map[string]any{"stateDir": "/var/lib/evil"}), code: 7,
			msg: `invalid stateDir: "/var/lib/evil" is outside the allowed roots /var/lib/cni, /run,`},
		{name: "stateDir escaping with ..", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"stateDir": e.stateDir + strings.Repeat("/..", strings.Count(e.stateDir, "/")) + "/var/lib/evil"}
		}), code: 7, msg: "(/var/lib/evil) is outside the allowed roots"},
		{name: "logFile outside the allowed roots", stdin: with(map[string]any{"logFile": "/var/lib/cron.d/x"}), code: 7,
			msg: `invalid logFile: "/var/lib/cron.d/x" is outside the allowed roots /var/log,`},
		{name: "sysfsRoot outside the allowed roots", stdin: with(map[string]any{"sysfsRoot": "/var/lib/sys"}), code: 7,
			msg: `invalid sysfsRoot: "/var/lib/sys" is outside the allowed roots /sys,`},

		// CNI_NETNS.
		{name: "netns missing", env: envs("CNI_NETNS=/var/run/netns/no-such-pod"), code: 4, msg: "pod netns /var/run/netns/no-such-pod does not exist"},
		{name: "netns is a regular file", env: func(e *badEnv) []string { return []string{"CNI_NETNS=" + filepath.Join(e.files, "regular")} },
			code: 4, msg: "does not exist"},
		{name: "netns empty", env: envs("CNI_NETNS="), code: 4, msg: "[CNI_NETNS] missing"},
		// Our DEL leaves the host alone and succeeds; skel then answers 8
		// for the same reason, as it does for every plugin.
		{name: "netns is the host's own", env: envs("CNI_NETNS=/proc/self/ns/net"), code: 4,
			msg: "CNI_NETNS /proc/self/ns/net is the host's network namespace", delCode: 8},

		// cniVersion.
		{name: "cniVersion 0.2.0", stdin: with(map[string]any{"cniVersion": "0.2.0"}), code: 1, msg: "incompatible CNI versions", delCode: 1},
		{name: "cniVersion 9.9.9", stdin: with(map[string]any{"cniVersion": "9.9.9"}), code: 1, msg: "incompatible CNI versions", delCode: 1},
		{name: "cniVersion missing", stdin: with(map[string]any{"cniVersion": nil}), code: 1, msg: "incompatible CNI versions", delCode: 1},

		// Other verbs and commands.
		{name: "CHECK at 0.3.1", cmd: "CHECK", stdin: with(map[string]any{"cniVersion": "0.3.1"}), code: 1, msg: "config version does not allow CHECK"},
		{name: "CHECK with a long ifname", cmd: "CHECK", env: envs("CNI_IFNAME=net1234567890123"), code: 4, msg: "interface name is too long"},
		{name: "GC at 1.0.0", cmd: "GC", stdin: with(map[string]any{"cniVersion": "1.0.0"}), code: 1, msg: "config version does not allow GC"},
		{name: "STATUS with stateDir under a file", cmd: "STATUS", stdin: withf(func(e *badEnv) map[string]any {
			return map[string]any{"stateDir": filepath.Join(e.files, "regular", "state")}
		}), code: 50, msg: "not a directory"},
		{name: "unknown CNI_COMMAND", cmd: "ATTACH", code: 4, msg: "unknown CNI_COMMAND: ATTACH"},
	}
}

// TestBadInputCorpus runs every hostile input through the binary, as a
// runtime would exec it, then DEL with the same input. Each must give its
// CNI code and message, never panic, write nothing outside the state dir
// and leave the host's links (and the pod's, for ADD) as they were.
func TestBadInputCorpus(t *testing.T) {
	e := newBadEnv(t)
	cases := badCases()
	if len(cases) < 40 {
		t.Fatalf("corpus has %d cases, want at least 40", len(cases))
	}
	t.Run("control: a good input changes the pod and writes only under stateDir", func(t *testing.T) {
		files, host, pod := e.snapshot(t), linkStates(t, nil), linkStates(t, e.pod)
		o := e.run(e.invocation("ADD", with(nil), nil))
		if o.Exit != 0 {
			t.Fatalf("ADD of the base config: %s", o)
		}
		if got := linkStates(t, e.pod); slices.Equal(got, pod) {
			t.Fatalf("the pod snapshot did not see ADD rename eth7 to net1")
		}
		if diff := e.diffOutsideState(files, e.snapshot(t)); diff != "" {
			t.Fatalf("good ADD wrote outside the state dir:\n%s", diff)
		}
		if len(e.records()) != 1 {
			t.Fatalf("good ADD wrote %d records", len(e.records()))
		}
		if o := e.run(e.invocation("DEL", with(nil), nil)); o.Exit != 0 {
			t.Fatalf("DEL: %s", o)
		}
		testutil.RenameIn(t, e.pod, "net1", "eth7")
		if got := linkStates(t, e.pod); !slices.Equal(got, pod) {
			t.Fatalf("pod after the control's DEL: %+v", got)
		}
		if got := linkStates(t, nil); !slices.Equal(got, host) {
			t.Fatalf("host links changed: %+v", got)
		}
	})
	start := time.Now()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			if cmd == "" {
				cmd = "ADD"
			}
			stdin := tc.stdin
			if stdin == nil {
				stdin = with(nil)
			}
			files, host, pod := e.snapshot(t), linkStates(t, nil), linkStates(t, e.pod)

			o := e.run(e.invocation(cmd, stdin, tc.env))
			if o.Err == nil || o.Err.Code != tc.code || !strings.Contains(o.Err.Msg+" "+o.Err.Details, tc.msg) {
				t.Errorf("%s: got %s\nwant code %d with %q", cmd, o, tc.code, tc.msg)
			}
			if o.Err != nil && len(o.Err.Msg) > 2000 {
				t.Errorf("%s: a %d-byte error message; messages must stay readable", cmd, len(o.Err.Msg))
			}
			e.assertUntouched(t, cmd, "", files, host, pod)
			if e.records() != nil {
				t.Errorf("%s wrote a record: %v", cmd, e.records())
			}
			if cmd != "ADD" {
				return
			}
			// The runtime's DEL after the failed ADD: it cleans up what it
			// can (here: nothing of ours) and succeeds, unless the input is
			// not a CNI call at all.
			del := e.invocation("DEL", stdin, tc.env)
			o = e.run(del)
			if got := uint(0); o.Err != nil {
				got = o.Err.Code
				if got != tc.delCode {
					t.Errorf("DEL: got %s, want code %d", o, tc.delCode)
				}
			} else if tc.delCode != 0 {
				t.Errorf("DEL: succeeded, want code %d", tc.delCode)
			}
			e.assertUntouched(t, "DEL", del.IfName, files, host, pod)
		})
	}
	t.Logf("%d bad inputs, each through ADD (or its verb) and DEL, in %s", len(cases), time.Since(start).Round(time.Millisecond))
}

func (e *badEnv) invocation(cmd string, stdin func(*badEnv) []byte, env func(*badEnv) []string) invocation {
	inv := invocation{Command: cmd, ContainerID: "bad-input", Netns: e.pod.Path(), IfName: "net1",
		Stdin: stdin(e), Dir: filepath.Join(e.root, "cwd")}
	if env != nil {
		inv.Env = env(e)
	}
	for _, kv := range inv.Env {
		if v, ok := strings.CutPrefix(kv, "CNI_IFNAME="); ok {
			inv.IfName = v
		}
	}
	return inv
}

// assertUntouched compares files and links with the snapshots. ADD (and
// the other verbs) must leave the pod as it was; DEL may give the VF its
// CNI_IFNAME (renamed, it is its job, so the plugin before us finds it),
// which is undone here for the next case.
func (e *badEnv) assertUntouched(t *testing.T, verb, delIfName string, files map[string]string, host, pod []linkState) {
	t.Helper()
	if diff := e.diffOutsideState(files, e.snapshot(t)); diff != "" {
		t.Errorf("%s wrote outside the state dir:\n%s", verb, diff)
	}
	if got := linkStates(t, nil); !slices.Equal(got, host) {
		t.Errorf("%s changed host links:\nbefore %+v\nafter  %+v", verb, host, got)
	}
	if delIfName != "" && delIfName != "eth7" && testutil.LinkIn(t, e.pod, delIfName) != nil {
		testutil.RenameIn(t, e.pod, delIfName, "eth7")
	}
	if got := linkStates(t, e.pod); !slices.Equal(got, pod) {
		t.Errorf("%s changed the pod's links:\nbefore %+v\nafter  %+v", verb, pod, got)
		e.resetPod(t, pod)
	}
}

// resetPod puts the VF back under eth7 after a case changed the pod, so
// one failure does not cascade; it fails when that is not enough.
func (e *badEnv) resetPod(t *testing.T, want []linkState) {
	t.Helper()
	for _, l := range linkStates(t, e.pod) {
		if l.Name != "lo" && l.Name != "eth7" {
			testutil.RenameIn(t, e.pod, l.Name, "eth7")
		}
	}
	if got := linkStates(t, e.pod); !slices.Equal(got, want) {
		t.Fatalf("cannot restore the pod for the next case:\nwant %+v\nhave %+v", want, got)
	}
}

// snapshot maps every path under the temp root, the sysfs fixture, /run/cni
// and /var/lib (private tmpfs mounts holding the default state dir and the
// old default it adopts from) to its type, mode, size and content hash.
func (e *badEnv) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, top := range []string{e.root, e.sys.Root, "/run/cni", "/var/lib"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			desc := info.Mode().String()
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(path)
				desc += " -> " + target
			case info.Mode().IsRegular():
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				desc += fmt.Sprintf(" %d %x", len(b), sha256.Sum256(b))
			}
			out[path] = desc
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot %s: %v", top, err)
		}
	}
	return out
}

// diffOutsideState lists differences between snapshots outside stateDir.
func (e *badEnv) diffOutsideState(before, after map[string]string) string {
	inState := func(p string) bool { return p == e.stateDir || strings.HasPrefix(p, e.stateDir+"/") }
	var lines []string
	for p, b := range before {
		if a, ok := after[p]; !inState(p) && (!ok || a != b) {
			lines = append(lines, fmt.Sprintf("changed or removed: %s", p))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && !inState(p) {
			lines = append(lines, fmt.Sprintf("created: %s", p))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
