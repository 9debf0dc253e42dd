package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs/sysfstest"
)

const npdDir = "../../deploy/node-problem-detector"

// npdConfig is node-problem-detector's custom plugin monitor configuration,
// the fields its documentation lists; decoding is strict, so a field NPD
// does not have fails the test.
type npdConfig struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval  string `json:"invoke_interval"`
		Timeout         string `json:"timeout"`
		MaxOutputLength int    `json:"max_output_length"`
		Concurrency     int    `json:"concurrency"`
	} `json:"pluginConfig"`
	Source           string `json:"source"`
	MetricsReporting bool   `json:"metricsReporting"`
	Conditions       []struct {
		Type, Reason, Message string
	} `json:"conditions"`
	Rules []struct {
		Type      string   `json:"type"`
		Condition string   `json:"condition"`
		Reason    string   `json:"reason"`
		Path      string   `json:"path"`
		Args      []string `json:"args"`
		Timeout   string   `json:"timeout"`
	} `json:"rules"`
}

func readNPDConfig(t *testing.T) npdConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(npdDir, "sriov-stable-doctor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c npdConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("sriov-stable-doctor.json: %v", err)
	}
	return c
}

// TestNPDConfigRunsTheDoctor runs the monitor config's rule as NPD would,
// against a healthy node, a broken one and an unreadable sysfs, and checks
// the exit codes NPD maps to the condition (0 False, 1 True, other
// Unknown) and that the message fits NPD's output limit.
func TestNPDConfigRunsTheDoctor(t *testing.T) {
	c := readNPDConfig(t)
	if c.Plugin != "custom" || len(c.Conditions) != 1 || len(c.Rules) != 1 {
		t.Fatalf("want a custom plugin with one condition and one rule: %+v", c)
	}
	rule, cond := c.Rules[0], c.Conditions[0]
	if rule.Type != "permanent" || rule.Condition != cond.Type || rule.Reason == cond.Reason {
		t.Errorf("rule %+v does not set condition %+v with a reason of its own", rule, cond)
	}
	if cond.Type == "NetworkUnavailable" {
		t.Error("NetworkUnavailable belongs to the primary CNI")
	}
	if path.Base(rule.Path) != "sriov-stable-agent" || len(rule.Args) == 0 || rule.Args[0] != "doctor" {
		t.Fatalf("rule runs %s %v, want sriov-stable-agent doctor", rule.Path, rule.Args)
	}

	healthy := sysfstest.NewDGXH200(t)
	broken := sysfstest.NewDGXH200(t)
	for _, vf := range []sysfstest.DGXVF{broken.PFs[2].VFs[1], broken.PFs[5].VFs[4]} {
		broken.SetRDMA(vf.PCI, sysfstest.RDMA{Name: vf.RDMA, NodeGUID: "0000:0000:0000:0000",
			Ports: []sysfstest.Port{{GID0: sysfstest.GID0(vf.PortGUID)}}})
	}
	for _, tc := range []struct {
		name, root string
		code       int
		says       []string
	}{
		{"healthy node: condition False", healthy.Root, 0, []string{"SR-IOV VFs healthy"}},
		{"zero GUIDs: condition True", broken.Root, 1, []string{"SR-IOV errors", broken.PFs[2].VFs[1].PCI}},
		{"sysfs unreadable: Unknown", filepath.Join(t.TempDir(), "missing"), 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := make([]string, 0, len(rule.Args))
			for _, a := range rule.Args {
				if strings.HasPrefix(a, "--sysfs-root=") {
					a = "--sysfs-root=" + tc.root
				}
				args = append(args, a)
			}
			code, out, errOut := runAgent(context.Background(), args...)
			if code != tc.code {
				t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, tc.code, out, errOut)
			}
			t.Logf("exit %d: %s", code, out)
			if n := len(strings.TrimSuffix(out, "\n")); n > c.PluginConfig.MaxOutputLength {
				t.Errorf("output of %d bytes, over max_output_length %d: %q", n, c.PluginConfig.MaxOutputLength, out)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("output %q does not say %q", out, s)
				}
			}
		})
	}
}

// TestNPDPatchInstallsTheAgent checks the DaemonSet patch puts the agent
// where the rule runs it from, with the config where NPD's flag names it.
func TestNPDPatchInstallsTheAgent(t *testing.T) {
	rule := readNPDConfig(t).Rules[0]
	data, err := os.ReadFile(filepath.Join(npdDir, "npd-daemonset-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("want one init container and the NPD container: %+v", spec)
	}
	init, npd := spec.InitContainers[0], spec.Containers[0]
	dir := path.Dir(rule.Path)
	wantCmd := []string{"/usr/bin/sriov-stable-agent", "install", "--dir", dir}
	if strings.Join(init.Command, " ") != strings.Join(wantCmd, " ") {
		t.Errorf("init container runs %q, want %q", init.Command, wantCmd)
	}
	volumes := func(c corev1.Container) map[string]string { // mount path → volume
		m := map[string]string{}
		for _, vm := range c.VolumeMounts {
			m[vm.MountPath] = vm.Name
		}
		return m
	}
	initMounts, npdMounts := volumes(init), volumes(npd)
	if v := initMounts[dir]; v == "" || npdMounts[dir] != v {
		t.Errorf("%s is not the same volume in the init container and NPD's", dir)
	}
	if npdMounts["/sys"] == "" {
		t.Error("NPD's container does not mount the host's /sys")
	}
	var flag string
	for _, a := range npd.Args {
		if v, ok := strings.CutPrefix(a, "--config.custom-plugin-monitor="); ok {
			flag = v
		}
	}
	if path.Base(flag) != "sriov-stable-doctor.json" || npdMounts[path.Dir(flag)] == "" {
		t.Errorf("NPD's --config.custom-plugin-monitor=%q is not the mounted config", flag)
	}
}

// mainMode makes the test binary run main(), as the real agent: the install
// test runs its installed copy.
const mainMode = "SRIOV_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainMode) != "" {
		main()
	}
	os.Exit(m.Run())
}

// TestInstallCommand installs this (test) binary as the agent, the way
// NPD's init container does, and proves the copy runs before it counts.
func TestInstallCommand(t *testing.T) {
	t.Setenv(mainMode, "1")
	dir := t.TempDir()
	for _, want := range []string{"installed", "unchanged"} {
		code, out, errOut := runAgent(context.Background(), "install", "--dir", dir)
		if code != 0 || !strings.HasPrefix(out, "sriov-stable-agent install: "+want+" "+filepath.Join(dir, "sriov-stable-agent")) {
			t.Fatalf("install: exit %d, want 0 and %q:\n%s%s", code, want, out, errOut)
		}
	}
	if code, _, errOut := runAgent(context.Background(), "install"); code != 2 || !strings.Contains(errOut, "--dir is required") {
		t.Errorf("install without --dir: exit %d, %q", code, errOut)
	}
}
