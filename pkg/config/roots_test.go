package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRootsFrom(t *testing.T) {
	def := DefaultRoots()
	plus := func(ignored []string, roots ...string) Roots {
		r := DefaultRoots()
		r.StateDir = append(r.StateDir, roots...)
		r.SysfsRoot = append(r.SysfsRoot, roots...)
		r.LogFile = append(r.LogFile, roots...)
		r.DeviceInfo = append(r.DeviceInfo, roots...)
		r.Ignored = ignored
		return r
	}
	tests := []struct {
		env  string
		want Roots
	}{
		{"", def},
		{":", def},
		{"/tmp", plus(nil, "/tmp")},
		{"/dev/shm:/tmp/:/var/tmp", plus(nil, "/dev/shm", "/tmp", "/var/tmp")},
		{"::/tmp//x/../y::", plus(nil, "/tmp/y")},
		{"tmp:./state:/srv", plus([]string{"tmp", "./state"}, "/srv")},
		{"~/x", plus([]string{"~/x"})},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, RootsFrom(tc.env)); diff != "" {
			t.Errorf("RootsFrom(%q) (-want +got):\n%s", tc.env, diff)
		}
	}
}

// TestParsePathsUnderRoots: stateDir, sysfsRoot and logFile are honoured
// only under their allowed roots, by default /var/lib/cni and /run,
// /sys, /var/log; AllowedRootsEnv adds roots for all three. Paths are
// cleaned before the check and kept cleaned, so ".." cannot escape.
func TestParsePathsUnderRoots(t *testing.T) {
	// A symlink inside an allowed root that points out of it: cleaning is
	// lexical, so "link/.." is the root again, never the link target's
	// parent, and the configuration carries the cleaned path the kernel
	// then resolves.
	tmp := t.TempDir()
	if err := os.Symlink("/etc/ssl/certs", filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, field, val, env string
		want                  string   // the parsed value when accepted
		errHas                []string // else what the error must say
	}{
		// stateDir: /var/lib/cni and /run.
		{name: "stateDir default place", field: "stateDir", val: "/run/cni/sriov-stable", want: "/run/cni/sriov-stable"},
		{name: "stateDir legacy place", field: "stateDir", val: "/var/lib/cni/sriov-stable", want: "/var/lib/cni/sriov-stable"},
		{name: "stateDir cleaned", field: "stateDir", val: "/run/./cni//sriov-stable/", want: "/run/cni/sriov-stable"},
		{name: "stateDir inner .. staying inside", field: "stateDir", val: "/run/cni/../sriov-stable", want: "/run/sriov-stable"},
		{name: "stateDir /etc", field: "stateDir", val: "/etc",
			errHas: []string{`invalid stateDir: "/etc" is outside the allowed roots /var/lib/cni, /run`, AllowedRootsEnv}},
		{name: "stateDir .. escape", field: "stateDir", val: "/run/../etc/cron.d",
			errHas: []string{`"/run/../etc/cron.d" (/etc/cron.d) is outside the allowed roots`}},
		{name: "stateDir deep .. escape", field: "stateDir", val: "/var/lib/cni/a/../../../../etc",
			errHas: []string{"(/etc) is outside"}},
		{name: "stateDir a root itself", field: "stateDir", val: "/run", errHas: []string{"is the allowed root /run itself"}},
		{name: "stateDir .. back to a root", field: "stateDir", val: "/run/cni/..", errHas: []string{"is the allowed root /run itself"}},
		{name: "stateDir name prefix is not a root", field: "stateDir", val: "/runner/state", errHas: []string{"outside the allowed roots"}},
		{name: "stateDir under /var/lib but not cni", field: "stateDir", val: "/var/lib/cnix/state", errHas: []string{"outside"}},
		{name: "stateDir under a root from the environment", field: "stateDir", val: "/dev/shm/t/state", env: "/dev/shm",
			want: "/dev/shm/t/state"},
		{name: "stateDir .. out of a root from the environment", field: "stateDir", val: "/dev/shm/../etc", env: "/dev/shm",
			errHas: []string{"outside the allowed roots /var/lib/cni, /run, /dev/shm"}},
		{name: "stateDir through a symlink, cleaned lexically", field: "stateDir", val: tmp + "/link/../state", env: tmp,
			want: tmp + "/state"},
		{name: "stateDir .. past a symlink's parent", field: "stateDir", val: tmp + "/link/../../etc", env: tmp,
			errHas: []string{"outside"}},
		{name: "stateDir with a relative root in the environment", field: "stateDir", val: "/srv/state", env: "srv:/dev/shm",
			errHas: []string{"outside the allowed roots /var/lib/cni, /run, /dev/shm", `ignored there, not absolute: "srv"`}},
		{name: "stateDir anywhere when the administrator allows /", field: "stateDir", val: "/srv/state", env: "/",
			want: "/srv/state"},
		{name: "stateDir a default root inside a wider one from the environment", field: "stateDir", val: "/run", env: "/",
			want: "/run"},
		{name: "stateDir / even when the administrator allows /", field: "stateDir", val: "/", env: "/",
			errHas: []string{"refusing to use / as the state directory"}},

		// sysfsRoot: /sys, itself included.
		{name: "sysfsRoot /sys", field: "sysfsRoot", val: "/sys", want: "/sys"},
		{name: "sysfsRoot /sys/", field: "sysfsRoot", val: "/sys/", want: "/sys"},
		{name: "sysfsRoot under /sys", field: "sysfsRoot", val: "/sys/fs/../devices", want: "/sys/devices"},
		{name: "sysfsRoot fixture outside", field: "sysfsRoot", val: "/tmp/fake-sys",
			errHas: []string{`invalid sysfsRoot: "/tmp/fake-sys" is outside the allowed roots /sys;`}},
		{name: "sysfsRoot .. escape", field: "sysfsRoot", val: "/sys/../proc", errHas: []string{"(/proc) is outside"}},
		{name: "sysfsRoot /", field: "sysfsRoot", val: "/", errHas: []string{"outside the allowed roots /sys"}},
		{name: "sysfsRoot from the environment", field: "sysfsRoot", val: "/tmp/fake-sys", env: "/tmp", want: "/tmp/fake-sys"},
		{name: "sysfsRoot a root from the environment itself", field: "sysfsRoot", val: "/host/sys", env: "/host/sys",
			want: "/host/sys"},

		// logFile: /var/log.
		{name: "logFile under /var/log", field: "logFile", val: "/var/log/sriov-stable-cni.log", want: "/var/log/sriov-stable-cni.log"},
		{name: "logFile cron", field: "logFile", val: "/etc/cron.d/x",
			errHas: []string{`invalid logFile: "/etc/cron.d/x" is outside the allowed roots /var/log;`}},
		{name: "logFile .. escape", field: "logFile", val: "/var/log/../../etc/cron.d/x", errHas: []string{"(/etc/cron.d/x) is outside"}},
		{name: "logFile the root itself", field: "logFile", val: "/var/log/", errHas: []string{"is the allowed root /var/log itself"}},
		{name: "logFile in a stateDir root is not allowed", field: "logFile", val: "/run/x.log", errHas: []string{"outside the allowed roots /var/log"}},
		{name: "logFile from the environment", field: "logFile", val: "/var/tmp/t/plugin.log", env: "/var/tmp",
			want: "/var/tmp/t/plugin.log"},
		{name: "logFile with only relative roots in the environment", field: "logFile", val: "/var/tmp/x.log", env: "var/tmp",
			errHas: []string{"outside the allowed roots /var/log", `"var/tmp"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := RootsFrom(tc.env)
			stdin := confJSON(t, map[string]any{tc.field: tc.val})
			conf, err := Parse(stdin, roots)
			lenient, lerr := ParseLenient(stdin, roots)
			if lerr != nil {
				t.Fatalf("ParseLenient: %v", lerr)
			}
			if tc.errHas == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				got := map[string]string{"stateDir": conf.StateDir, "sysfsRoot": conf.SysfsRoot, "logFile": conf.LogFile}[tc.field]
				if got != tc.want {
					t.Errorf("%s = %q, want %q", tc.field, got, tc.want)
				}
				if lenient.PathError != nil || lenient.StateDir != conf.StateDir || lenient.SysfsRoot != conf.SysfsRoot ||
					lenient.LogFile != conf.LogFile {
					t.Errorf("ParseLenient disagrees: %+v", lenient)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted %s %q: %+v", tc.field, tc.val, conf)
			}
			if got := fieldOf(t, err); got != tc.field {
				t.Errorf("error names field %q, want %q: %v", got, tc.field, err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q:\n%v", s, err)
				}
			}
			// DEL: no path of this configuration is used, nothing of it
			// is written anywhere; the VF is still handed back.
			if lenient.PathError == nil || lenient.StateDir != DefaultStateDir || lenient.SysfsRoot != DefaultSysfsRoot ||
				lenient.LogFile != "" {
				t.Errorf("ParseLenient: PathError %v, stateDir %q, sysfsRoot %q, logFile %q; want the error and defaults",
					lenient.PathError, lenient.StateDir, lenient.SysfsRoot, lenient.LogFile)
			}
		})
	}
}

// TestDeviceInfoFileUnderRoots: the plugin reads and may rewrite the
// Device Info file a configuration names, so it is bounded like the other
// paths: Multus' devinfo directory by default, plus the administrator's
// roots.
func TestDeviceInfoFileUnderRoots(t *testing.T) {
	for _, tc := range []struct {
		val, env string
		ok       bool
	}{
		{"/var/run/k8s.cni.cncf.io/devinfo/cni/ns-pod-net1-device-info.json", "", true},
		{"/run/k8s.cni.cncf.io/devinfo/dp/x.json", "", true},
		{"/etc/shadow", "", false},
		{"/var/run/k8s.cni.cncf.io/devinfo/../../../etc/passwd", "", false},
		{"/var/run/k8s.cni.cncf.io/devinfo", "", false},
		{"/tmp/t/devinfo.json", "/tmp", true},
	} {
		stdin := confJSON(t, map[string]any{"runtimeConfig": map[string]any{"CNIDeviceInfoFile": tc.val}})
		conf, err := Parse(stdin, RootsFrom(tc.env))
		if tc.ok != (err == nil) {
			t.Errorf("CNIDeviceInfoFile %q (roots from %q): %v, want accepted %v", tc.val, tc.env, err, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "invalid runtimeConfig.CNIDeviceInfoFile") {
			t.Errorf("the error does not name the field: %v", err)
		}
		if err == nil && conf.RuntimeConfig.CNIDeviceInfoFile != filepath.Clean(tc.val) {
			t.Errorf("CNIDeviceInfoFile kept as %q", conf.RuntimeConfig.CNIDeviceInfoFile)
		}
		lenient, lerr := ParseLenient(stdin, RootsFrom(tc.env))
		if lerr != nil || (!tc.ok && lenient.RuntimeConfig.CNIDeviceInfoFile != "") {
			t.Errorf("ParseLenient of %q: %v, kept %q; want the path dropped", tc.val, lerr, lenient.RuntimeConfig.CNIDeviceInfoFile)
		}
	}
}
