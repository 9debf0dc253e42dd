package kubecluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// at is the value at a path (keys joined by /) of a decoded document (nil when absent).
func at(doc map[string]any, path string) any {
	var v any = doc
	for _, k := range strings.Split(path, "/") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// docFields decodes a YAML or JSON document and returns the values at paths,
// printed, for a cmp.Diff against what they must be.
func docFields(t *testing.T, doc string, paths ...string) map[string]string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
	out := map[string]string{}
	for _, p := range paths {
		out[p] = fmt.Sprint(at(m, p))
	}
	return out
}

func TestServiceIPs(t *testing.T) {
	if got := firstServiceIP().String(); got != "198.19.0.1" {
		t.Errorf("the kubernetes Service's ClusterIP is %s, want 198.19.0.1 (the first of %s)", got, serviceCIDR)
	}
	if got := serviceIP(10); got != "198.19.0.10" {
		t.Errorf("serviceIP(10) is %s, want 198.19.0.10", got)
	}
}

// TestComponentConfigs reads the YAML configurations as the components
// do, for what the run depends on. kubelet: pods under the run's own
// cgroup, the runtime's socket, the node IP, the CA, DNS in the service
// range, eviction thresholds that are percentages (the template's %% must
// come out as one %), cgroup v1 allowed. kube-proxy: nftables mode for the
// pod network, and nothing of the host's touched: conntrack limits and
// timeouts left as they are, no oom_score_adj, health and metrics on
// loopback.
func TestComponentConfigs(t *testing.T) {
	for _, tc := range []struct {
		file, doc string
		want      map[string]string // by path, keys joined by /
	}{
		{"kubelet.yaml", kubeletConfig("/pki/ca.crt"), map[string]string{
			"kind":                             "KubeletConfiguration",
			"cgroupDriver":                     "cgroupfs",
			"cgroupRoot":                       "/sriov-stable-e2e",
			"failCgroupV1":                     "false",
			"containerRuntimeEndpoint":         "unix:///run/containerd/containerd.sock",
			"address":                          NodeIP,
			"authentication/anonymous/enabled": "false",
			"authentication/webhook/enabled":   "false",
			"authentication/x509/clientCAFile": "/pki/ca.crt",
			"authorization/mode":               "AlwaysAllow",
			"clusterDNS":                       "[198.19.0.10]",
			"resolvConf":                       "/run/sriov-e2e/resolv.conf",
			"evictionHard/nodefs.available":    "1%",
			"evictionHard/imagefs.inodesFree":  "1%",
			"imageGCHighThresholdPercent":      "100",
			"healthzPort":                      "10248",
			"localStorageCapacityIsolation":    "false",
		}},
		{"kube-proxy.yaml", kubeProxyConfig("/pki/admin.kubeconfig"), map[string]string{
			"kind":                            "KubeProxyConfiguration",
			"mode":                            "nftables",
			"clientConnection/kubeconfig":     "/pki/admin.kubeconfig",
			"hostnameOverride":                NodeName,
			"bindAddress":                     NodeIP,
			"clusterCIDR":                     "198.18.0.0/24",
			"healthzBindAddress":              "127.0.0.1:10256",
			"metricsBindAddress":              "127.0.0.1:10249",
			"oomScoreAdj":                     "0",
			"conntrack/maxPerCore":            "0",
			"conntrack/min":                   "0",
			"conntrack/tcpEstablishedTimeout": "0s",
			"conntrack/tcpCloseWaitTimeout":   "0s",
		}},
	} {
		got := docFields(t, tc.doc, slices.Collect(maps.Keys(tc.want))...)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.file, diff)
		}
	}
}

// TestAuditPolicy: the users' requests at Metadata, nobody else's, the
// received stage left out; a service account's name (colons) survives.
func TestAuditPolicy(t *testing.T) {
	users := []string{"system:serviceaccount:sriov-stable-cni:sriov-stable-cni", "other"}
	text, err := auditPolicy(users)
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Level string   `json:"level"`
		Users []string `json:"users,omitempty"`
	}
	var got struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		OmitStages []string `json:"omitStages"`
		Rules      []rule   `json:"rules"`
	}
	if err := yaml.UnmarshalStrict([]byte(text), &got); err != nil {
		t.Fatalf("%v:\n%s", err, text)
	}
	want := got
	want.APIVersion, want.Kind, want.OmitStages = "audit.k8s.io/v1", "Policy", []string{"RequestReceived"}
	want.Rules = []rule{{Level: "Metadata", Users: users}, {Level: "None"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit policy (-want +got):\n%s", diff)
	}
}

// TestContainerdConfig: the settings the e2e's findings hang on (the
// oom_score_adj clamp, cgroupfs, the run's runc, the local pause image
// pinned, one CNI configuration from the node's dirs), each a line.
func TestContainerdConfig(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(containerdConfig("/cache/bin"), "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	for _, want := range []string{
		`address = "/run/containerd/containerd.sock"`,
		`sandbox = "localhost/sriov-stable-e2e/pause:1"`,
		`restrict_oom_score_adj = true`,
		`runtime_type = "io.containerd.runc.v2"`,
		`BinaryName = "/cache/bin/runc"`,
		`SystemdCgroup = false`,
		`bin_dirs = ["/opt/cni/bin"]`,
		`conf_dir = "/run/sriov-e2e/net.d"`,
		`max_conf_num = 1`,
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("containerd.toml has no line %s", want)
		}
	}
}

// TestMultusConfig: the thin plugin with the admin kubeconfig, the node's
// CNI bin dir, its log in the run's logs, the pod network delegated to
// bridge + host-local on the pod subnet with a default route.
func TestMultusConfig(t *testing.T) {
	b, err := multusConfig("/pki/admin.kubeconfig", "/work/logs")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Type, Kubeconfig, BinDir, LogFile string
		Delegates                         []struct {
			Plugins []struct {
				Type string
				IPAM struct {
					Type   string
					Ranges [][]struct{ Subnet string }
					Routes []struct{ Dst string }
				}
			}
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Type != "multus" || conf.Kubeconfig != "/pki/admin.kubeconfig" || conf.BinDir != CNIBinDir || conf.LogFile != "/work/logs/multus.log" {
		t.Errorf("multus: type %q kubeconfig %q binDir %q logFile %q", conf.Type, conf.Kubeconfig, conf.BinDir, conf.LogFile)
	}
	if len(conf.Delegates) != 1 || len(conf.Delegates[0].Plugins) != 1 {
		t.Fatalf("want one delegate of one plugin:\n%s", b)
	}
	p := conf.Delegates[0].Plugins[0]
	if p.Type != "bridge" || p.IPAM.Type != "host-local" || len(p.IPAM.Ranges) != 1 || len(p.IPAM.Ranges[0]) != 1 ||
		p.IPAM.Ranges[0][0].Subnet != "198.18.0.0/24" || len(p.IPAM.Routes) != 1 || p.IPAM.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("the pod network is not bridge + host-local on 198.18.0.0/24 with a default route:\n%s", b)
	}
}
