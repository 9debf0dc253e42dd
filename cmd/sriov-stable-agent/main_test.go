package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

func runAgent(ctx context.Context, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandLine(t *testing.T) {
	state := t.TempDir()
	for _, tc := range []struct {
		args   []string
		code   int
		output string
	}{
		{nil, 2, "sriov-stable-agent monitor"},
		{[]string{"version"}, 0, "commit:"},
		{[]string{"--version"}, 0, "commit:"},
		{[]string{"version", "extra"}, 2, `sriov-stable-agent version: unexpected argument "extra"`},
		{[]string{"help"}, 0, "monitor [flags]"},
		{[]string{"help"}, 0, "hostconfig [flags]"},
		{[]string{"doctor", "--help"}, 0, "usage: sriov-stable-agent doctor [flags]"},
		{[]string{"doctor", "--sysfs-root", state, "extra"}, 2, `sriov-stable-agent doctor: unexpected argument "extra"`},
		{[]string{"hostconfig", "--help"}, 0, "sriov-stable-agent hostconfig --spec node.yaml --check"},
		{[]string{"hostconfig", "--check"}, 2, "sriov-stable-agent hostconfig: --spec is required"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"monitor", "--help"}, 0, "-stale-grace"},
		{[]string{"monitor", "--help"}, 0, "doctor: expected link layer"},
		{[]string{"monitor", "--bogus"}, 2, `flag provided but not defined: -bogus
run "sriov-stable-agent monitor --help" for the flags`},
		{[]string{"monitor", "--state-dir", state, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"monitor", "--state-dir", state, "--interval=-1s"}, 2, "interval -1s is negative"},
		{[]string{"monitor", "--state-dir", state, "--interval=1s", "--check-timeout=2s"}, 2, "at most the interval"},
		{[]string{"monitor", "--state-dir", state, "--log-level=loud"}, 2, "--log-level"},
		{[]string{"monitor", "--state-dir", state, "--name-pattern=("}, 2, "--name-pattern"},
		{[]string{"monitor", "--state-dir", state, "--spec", filepath.Join(state, "none.yaml")}, 2, "monitor: read hostconfig spec: open"},
		{[]string{"monitor", "--state-dir", state, "--listen=256.0.0.1:1"}, 1, "listen for metrics"},
	} {
		code, out, errOut := runAgent(context.Background(), tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.output) {
			t.Errorf("sriov-stable-agent %v: exit %d, want %d with %q in:\n%s%s", tc.args, code, tc.code, tc.output, out, errOut)
		}
		if code == 0 && errOut != "" || code != 0 && out != "" {
			t.Errorf("sriov-stable-agent %v: exit %d with stdout %q, stderr %q: output belongs on stdout, errors on stderr", tc.args, code, out, errOut)
		}
	}
}

// The monitor runs until its context ends (SIGTERM in main), then stops
// its server and loop and exits 0.
func TestMonitorStopsWithItsContext(t *testing.T) {
	runMonitorUntil(t, func(log string) bool { return strings.Count(log, "sweep done") >= 3 },
		"--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--interval", "50ms", "--doctor-interval", "0")
}

// runMonitorUntil runs the monitor with args (and debug logs) until its log
// satisfies until, then ends its context; the monitor must exit 0 within
// 10 s. It returns the log.
func runMonitorUntil(t *testing.T, until func(log string) bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var errOut syncWriter
	go func() {
		done <- run(ctx, append([]string{"monitor", "--log-level=debug"}, args...), &bytes.Buffer{}, &errOut)
	}()
	for deadline := time.Now().Add(10 * time.Second); !until(errOut.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the monitor's log did not get there within 10s:\n%s", errOut.String())
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after the context ended, want 0:\n%s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the monitor did not stop within 10s of its context ending")
	}
	return errOut.String()
}

// syncWriter is a buffer the agent's goroutines write while the test reads.
type syncWriter = testutil.LogBuffer

const deployDir = "../../deploy"

// monitorContainer decodes the DaemonSet patch of deploy/monitor strictly
// and returns it with its monitor container.
func monitorContainer(t *testing.T) (*appsv1.DaemonSet, corev1.Container) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, "monitor", "daemonset-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict(data, ds); err != nil {
		t.Fatalf("daemonset-patch.yaml: %v", err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "monitor" {
			return ds, c
		}
	}
	t.Fatal("daemonset-patch.yaml has no monitor container")
	return nil, corev1.Container{}
}

// The container's arguments are flags this agent accepts, with valid values.
func TestDeployArgsAreAccepted(t *testing.T) {
	_, c := monitorContainer(t)
	if !slices.Equal(c.Command, []string{"/usr/bin/sriov-stable-agent", "monitor"}) {
		t.Fatalf("command %v, want the agent's monitor", c.Command)
	}
	args := append(append([]string{"monitor"}, c.Args...), "--help") // --help stops after parsing the rest
	if code, out, errOut := runAgent(context.Background(), args...); code != 0 {
		t.Errorf("the agent rejects the manifest's arguments %v:\n%s%s", c.Args, out, errOut)
	}
	if !slices.Contains(c.Args, "--state-dir="+config.DefaultStateDir) {
		t.Errorf("args %v do not watch the plugin's default state dir %s", c.Args, config.DefaultStateDir)
	}
}

// The monitor container gets exactly the access the docs promise.
func TestDeployMonitorAccess(t *testing.T) {
	ds, c := monitorContainer(t)
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("monitor container has no security context with capabilities")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SYS_ADMIN"}) {
		t.Errorf("capabilities drop %v add %v, want drop [ALL] add [SYS_ADMIN]", sc.Capabilities.Drop, sc.Capabilities.Add)
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v: want unprivileged, no escalation, read-only root", sc)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, p := range []string{"/run/netns", "/var/run/netns"} {
		m, ok := mounts[p]
		if !ok || hostPaths[m.Name] != "/run/netns" || m.MountPropagation == nil ||
			*m.MountPropagation != corev1.MountPropagationHostToContainer || !m.ReadOnly {
			t.Errorf("%s: want the host's /run/netns, read-only, HostToContainer; got %+v", p, m)
		}
	}
	if m, ok := mounts[config.DefaultStateDir]; !ok || hostPaths[m.Name] != config.DefaultStateDir || m.ReadOnly {
		t.Errorf("state dir mount %+v: want the host's %s read-write", m, config.DefaultStateDir)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9808 || !slices.Contains(c.Args, "--listen=:9808") {
		t.Errorf("ports %+v / args %v: want port metrics 9808 matching --listen", c.Ports, c.Args)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("probe %+v: want GET %s on port metrics", probe, path)
		}
	}
}

// The Service selects the DaemonSet's pods, and the ServiceMonitor the
// Service, by the port the container names.
func TestDeployServiceAndServiceMonitor(t *testing.T) {
	var base appsv1.DaemonSet
	data, err := os.ReadFile(filepath.Join(deployDir, "daemonset", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &base); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	data, err = os.ReadFile(filepath.Join(deployDir, "monitor", "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &svc); err != nil {
		t.Fatalf("service.yaml: %v", err)
	}
	podLabels := base.Spec.Template.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not match the DaemonSet's pod labels %v", k, v, podLabels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %+v: want headless, one port targeting metrics", svc.Spec)
	}
	var sm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	data, err = os.ReadFile(filepath.Join(deployDir, "monitor", "servicemonitor", "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &sm); err != nil {
		t.Fatal(err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("servicemonitor.yaml is %s %s", sm.APIVersion, sm.Kind)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the Service is labelled %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v: want the Service's %s port, /metrics", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
}

// The components render into the DaemonSet as the docs say: the monitor
// container next to the installer, image and namespace set by
// deploy/daemonset's kustomization.
func TestDeployComponentsRender(t *testing.T) {
	docs, ds := renderDeploy(t, "../monitor/servicemonitor")
	for _, want := range []string{"Service/sriov-stable-monitor", "ServiceMonitor/sriov-stable-monitor"} {
		var meta struct {
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		doc, ok := docs[want]
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if !ok || meta.Metadata.Namespace != "sriov-stable-cni" {
			t.Errorf("rendered %s in namespace %q (present %v), want sriov-stable-cni", want, meta.Metadata.Namespace, ok)
		}
	}
	images := map[string]string{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		images[c.Name] = c.Image
	}
	if images["monitor"] == "" || images["monitor"] != images["keep-installed"] {
		t.Errorf("rendered containers %v: want the monitor on the installer's image", images)
	}
}
