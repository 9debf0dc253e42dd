package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/sriov-stable-cni/sriov-stable-cni/integration/harness"
)

// TestHostNetnsIsNeverActedIn runs the real binary through libcni with
// CNI_NETNS naming the runtime's own netns, which the plugin inherits: the
// host's. The VF's stand-in is there under its host name with its
// altname, so an ADD that went ahead would rename it to net1 on the host.
// ADD must answer 4 and change and write nothing; DEL must leave the
// host's links as they were. The CNI library's skel makes a check of its
// own, after the verb has run: it answers 8 unless the runtime sets
// CNI_NETNS_OVERRIDE, so both are run, without and with it.
func TestHostNetnsIsNeverActedIn(t *testing.T) {
	for _, override := range []bool{false, true} {
		t.Run(fmt.Sprintf("CNI_NETNS_OVERRIDE=%v", override), func(t *testing.T) {
			if override {
				t.Setenv("CNI_NETNS_OVERRIDE", "1") // libcni hands the test's environment to the plugin
			}
			e := newEnv(t, vfOpts{numVFs: 1})
			hostNetns := fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
			// Our plugin alone, with prevResult in its configuration as an
			// upstream plugin that put the VF "in the pod" would hand it over.
			prev := map[string]any{"cniVersion": "1.1.0", "interfaces": []map[string]any{{"name": "net1", "sandbox": hostNetns}}}
			b, _ := json.Marshal(e.ours(0, map[string]any{"cniVersion": "1.1.0", "name": "vfnet", "prevResult": prev}))
			conf, err := libcni.ConfFromBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			cni := libcni.NewCNIConfigWithCacheDir([]string{e.bins}, e.cacheDir, nil)
			rt := &libcni.RuntimeConf{ContainerID: "c-host", NetNS: hostNetns, IfName: "net1"}
			before := hostLinks(t)

			_, err = cni.AddNetwork(context.Background(), conf, rt)

			if harness.ErrCode(err) != 4 || !strings.Contains(err.Error(), "CNI_NETNS "+hostNetns+" is the host's network namespace") {
				t.Fatalf("ADD in the host's netns: got %v, want code 4 naming the netns", err)
			}
			if after := hostLinks(t); !slices.Equal(before, after) {
				t.Errorf("ADD changed the host's links:\nbefore %v\nafter  %v", before, after)
			}
			if _, err := os.Stat(e.stateDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ADD made the state dir %s (%v): want no record, no lock", e.stateDir, err)
			}

			err = cni.DelNetwork(context.Background(), conf, rt)
			if override && err != nil {
				t.Fatalf("DEL in the host's netns: %v", err)
			}
			if !override && (harness.ErrCode(err) != 8 || !strings.Contains(err.Error(), "should not be the same")) {
				t.Fatalf("DEL in the host's netns: got %v, want skel's code 8 after our DEL", err)
			}
			if after := hostLinks(t); !slices.Equal(before, after) {
				t.Errorf("DEL changed the host's links:\nbefore %v\nafter  %v", before, after)
			}
			e.wantHome(0)
		})
	}
}

// hostLinks describes the links of the test's (host) netns: name,
// altnames, state.
func hostLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlinksafe.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		out = append(out, fmt.Sprintf("%s %v %s", a.Name, a.AltNames, a.OperState))
	}
	slices.Sort(out)
	return out
}
