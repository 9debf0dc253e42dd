package plugin_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// TestHostNetnsIsNeverActedIn gives the verbs, which run inside the host
// stand-in, that very netns as CNI_NETNS. The VF's stand-in is there
// under its host name with its altname, so an ADD that went ahead would
// find it and rename it to net1 on the host, and a DEL would do the same.
// ADD must refuse with 4 before it changes or writes anything; DEL must
// succeed and leave the host's links alone.
func TestHostNetnsIsNeverActedIn(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	t.Run("ADD", func(t *testing.T) {
		f := newFixture(t, node)
		a := args("ctr", f.host, "net1", stdin(t, f.conf(nil), hostDeviceResult(f.host, "net1")))
		hostBefore := links(t, f.host)

		_, err := f.add(t, a)

		if got := cniCode(t, err); got != types.ErrInvalidEnvironmentVariables {
			t.Fatalf("ADD: code %d (%v), want %d", got, err, types.ErrInvalidEnvironmentVariables)
		}
		for _, s := range []string{"CNI_NETNS " + f.host.Path(), "is the host's network namespace", "refusing"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ADD error does not say %q: %v", s, err)
			}
		}
		if diff := cmp.Diff(hostBefore, links(t, f.host)); diff != "" {
			t.Errorf("ADD changed the host's links (-before +after):\n%s", diff)
		}
		// No record, no lock file, no lock index: the state dir was never made.
		if _, err := os.Stat(f.stateDir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ADD made the state dir %s (%v): want nothing written", f.stateDir, err)
		}
	})
	t.Run("DEL", func(t *testing.T) {
		f := newFixture(t, node)
		a := args("ctr", f.host, "net1", stdin(t, f.conf(nil), hostDeviceResult(f.host, "net1")))
		hostBefore := links(t, f.host)

		if err := f.del(t, a); err != nil {
			t.Fatalf("DEL: %v", err)
		}

		if diff := cmp.Diff(hostBefore, links(t, f.host)); diff != "" {
			t.Errorf("DEL changed the host's links (-before +after):\n%s", diff)
		}
		if l := f.logLines(t, "DEL: CNI_NETNS is the host's network namespace", f.host.Path()); len(l) != 1 {
			t.Errorf("want one log line saying DEL left the host alone, got %q", l)
		}
	})
}

// TestPathsOutsideAllowedRoots runs a network configuration whose logFile,
// stateDir or sysfsRoot lies outside the allowed roots, as a namespace user
// may write one: ADD is error 7 naming the field and the roots and creates
// nothing there, and DEL still hands the VF back (named CNI_IFNAME again)
// without writing anything there. The allowed roots are narrowed to the
// fixture's own directories; a sibling temp dir stands in for /etc.
func TestPathsOutsideAllowedRoots(t *testing.T) {
	requireRoot(t)
	node := newDGX(t)
	cases := []struct {
		name, field string
		path        func(f *fixture, outside string) string
		// notFound: DEL reads the host's /sys in place of the refused
		// sysfsRoot. A real VF is found there by its PCI parent; the veth
		// stand-in only by the altname the fixture's sysfs renders, so DEL
		// finds nothing to hand back, and succeeds.
		notFound bool
	}{
		{"logFile in cron.d", "logFile", func(_ *fixture, out string) string { return filepath.Join(out, "cron.d", "x") }, false},
		{"stateDir /etc", "stateDir", func(_ *fixture, out string) string { return filepath.Join(out, "etc") }, false},
		{"stateDir escaping its root with ..", "stateDir", func(f *fixture, out string) string {
			rel, err := filepath.Rel(filepath.Dir(f.stateDir), filepath.Join(out, "etc"))
			if err != nil || !strings.HasPrefix(rel, "..") {
				panic("the outside dir is not outside")
			}
			return filepath.Dir(f.stateDir) + "/" + rel // <allowed>/../<outside>/etc, not cleaned
		}, false},
		{"logFile escaping its root with ..", "logFile", func(f *fixture, out string) string {
			return filepath.Dir(f.logFile) + "/../" + filepath.Base(out) + "/x.log"
		}, false},
		{"sysfsRoot outside", "sysfsRoot", func(_ *fixture, out string) string { return out }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, node)
			outside := t.TempDir()
			t.Setenv(config.AllowedRootsEnv, f.sys.Root+":"+filepath.Dir(f.stateDir))
			f.moveIn(t, f.pod, "ib0")
			path := tc.path(f, outside)
			a := args("ctr", f.pod, "net1", stdin(t, f.conf(map[string]any{tc.field: path}), hostDeviceResult(f.pod, "net1")))
			podBefore, hostBefore := links(t, f.pod), links(t, f.host)

			_, err := f.add(t, a)

			if got := cniCode(t, err); got != types.ErrInvalidNetworkConfig {
				t.Fatalf("ADD: code %d (%v), want %d", got, err, types.ErrInvalidNetworkConfig)
			}
			for _, s := range []string{"invalid " + tc.field + ": ", "is outside the allowed roots", config.AllowedRootsEnv} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("ADD error does not say %q: %v", s, err)
				}
			}
			if diff := cmp.Diff(podBefore, links(t, f.pod)); diff != "" {
				t.Errorf("ADD changed the pod netns (-before +after):\n%s", diff)
			}
			wantEmpty(t, outside, "ADD")

			if err := f.del(t, a); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if l := link(t, f.pod, "net1"); l == nil && !tc.notFound {
				t.Errorf("DEL did not hand the VF back as net1: the pod holds %+v", links(t, f.pod))
			}
			if diff := cmp.Diff(hostBefore, links(t, f.host)); diff != "" {
				t.Errorf("DEL changed the host's links (-before +after):\n%s", diff)
			}
			wantEmpty(t, outside, "DEL")
		})
	}
}

// wantEmpty fails unless dir holds nothing.
func wantEmpty(t *testing.T, dir, verb string) {
	t.Helper()
	var made []string
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if p != dir {
			made = append(made, p)
		}
		return err
	})
	if len(made) > 0 {
		t.Errorf("%s created %q outside the allowed roots", verb, made)
	}
}
