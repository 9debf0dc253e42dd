package pluginconf

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

const (
	pluginType       = "sriov-stable-cni"
	resourceNameAnno = "k8s.v1.cni.cncf.io/resourceName"
	// What Multus passes for the allocated VF: a device plugin PCI address
	// and the Device Info file of the attachment.
	multusPCI     = "0000:18:00.2"
	multusDevInfo = "/var/run/k8s.cni.cncf.io/devinfo/cni/ns-pod-net1-device-info.json"
)

// network is what one example network must look like, whichever way it is
// defined (a NAD by hand, or a CR the SR-IOV operator renders into a NAD).
type network struct {
	name         string
	resource     string   // full resource name, prefix included
	types        []string // plugin types in chain order
	linkLayer    string
	mtu          int
	guidPolicy   config.Policy
	crFile       string // the operator CR that renders the same network
	policyFile   string // the SriovNetworkNodePolicy providing the resource
	wantLinkType string // that policy's linkType
}

var networks = map[string]network{
	"nad-infiniband.yaml": {
		name: "ib-sriov-stable", resource: "nvidia.com/dgx_h200_vfs", types: []string{"ib-sriov", pluginType},
		linkLayer: config.LinkLayerInfiniBand, mtu: 4092, guidPolicy: config.PolicyRequire,
		crFile: "sriov-network-operator/sriovibnetwork.yaml", policyFile: "sriov-network-operator/policy-infiniband.yaml",
		wantLinkType: "IB",
	},
	"nad-roce.yaml": {
		name: "roce-sriov-stable", resource: "nvidia.com/dgx_h200_roce_vfs", types: []string{"sriov", pluginType},
		linkLayer: config.LinkLayerEthernet, mtu: 9000, guidPolicy: config.PolicyWarn,
		crFile: "sriov-network-operator/sriovnetwork.yaml", policyFile: "sriov-network-operator/policy-roce.yaml",
		wantLinkType: "ETH",
	},
}

const valuesFile = "network-operator/values.yaml"

// TestEveryExampleIsChecked keeps new files from slipping in untested.
func TestEveryExampleIsChecked(t *testing.T) {
	known := []string{valuesFile}
	for nad, n := range networks {
		known = append(known, nad, n.crFile, n.policyFile)
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); (ext == ".yaml" || ext == ".yml" || ext == ".json") && !slices.Contains(known, path) {
			t.Errorf("%s is not checked by any test in this package", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNetworkAttachmentDefinitions(t *testing.T) {
	for file, want := range networks {
		t.Run(file, func(t *testing.T) {
			var nad nadv1.NetworkAttachmentDefinition
			mustDecode(t, file, &nad)
			if nad.APIVersion != "k8s.cni.cncf.io/v1" || nad.Kind != "NetworkAttachmentDefinition" {
				t.Fatalf("apiVersion/kind %s/%s", nad.APIVersion, nad.Kind)
			}
			if nad.Name != want.name {
				t.Errorf("name %q, want %q", nad.Name, want.name)
			}
			if nad.Namespace != "" {
				t.Errorf("namespace %q set; leave it to kubectl -n", nad.Namespace)
			}
			if got := nad.Annotations[resourceNameAnno]; got != want.resource {
				t.Errorf("%s = %q, want %q", resourceNameAnno, got, want.resource)
			}
			list := checkConfList(t, []byte(nad.Spec.Config), want)
			if list.Name != nad.Name {
				t.Errorf("config name %q differs from the NAD name %q", list.Name, nad.Name)
			}
		})
	}
}

// checkConfList parses a NAD's config with libcni, checks the chain, and
// validates our plugin's entry with the plugin's own parser, both as written
// and as the plugin receives it from libcni under Multus.
func checkConfList(t *testing.T, conf []byte, want network) *libcni.NetworkConfigList {
	t.Helper()
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatalf("libcni rejects the config: %v\n%s", err, conf)
	}
	if list.Name != want.name {
		t.Errorf("network name %q, want %q", list.Name, want.name)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if !slices.Equal(types, want.types) {
		t.Fatalf("plugin chain %v, want %v", types, want.types)
	}
	ours := list.Plugins[len(list.Plugins)-1]
	for _, c := range []string{"deviceID", "CNIDeviceInfoFile"} {
		if !ours.Network.Capabilities[c] {
			t.Errorf("%s does not declare capability %q", pluginType, c)
		}
	}

	// As written: valid, and no PCI address (Multus injects it per pod).
	asWritten, err := libcni.InjectConf(ours, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(asWritten.Bytes, config.DefaultRoots())
	if err != nil {
		t.Fatalf("%s rejects its config: %v\n%s", pluginType, err, asWritten.Bytes)
	}
	if c.PCIAddress != "" {
		t.Errorf("the example pins PCI address %s; it must come from Multus", c.PCIAddress)
	}
	if c.LinkLayer != want.linkLayer || c.MTU != want.mtu || c.GUIDPolicy != want.guidPolicy || c.PortPolicy != config.PolicyRequire {
		t.Errorf("linkLayer %s mtu %d guidPolicy %s portPolicy %s; want %s %d %s require",
			c.LinkLayer, c.MTU, c.GUIDPolicy, c.PortPolicy, want.linkLayer, want.mtu, want.guidPolicy)
	}

	// As received: Multus sets deviceID and pciBusID on every plugin and
	// passes capability args, which libcni forwards only where declared.
	capArgs := map[string]any{"deviceID": multusPCI, "CNIDeviceInfoFile": multusDevInfo, "mac": "02:00:00:00:00:01"}
	runtimeConfig := map[string]any{}
	for capName, on := range ours.Network.Capabilities {
		if v, ok := capArgs[capName]; ok && on {
			runtimeConfig[capName] = v
		}
	}
	received, err := libcni.InjectConf(asWritten, map[string]any{
		"deviceID": multusPCI, "pciBusID": multusPCI, "runtimeConfig": runtimeConfig,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err = config.Parse(received.Bytes, config.DefaultRoots())
	if err != nil {
		t.Fatalf("%s rejects the config Multus sends: %v\n%s", pluginType, err, received.Bytes)
	}
	if c.PCIAddress != multusPCI || c.RuntimeConfig.CNIDeviceInfoFile != multusDevInfo {
		t.Errorf("PCI %q devinfo %q from Multus' injection; want %s and %s", c.PCIAddress, c.RuntimeConfig.CNIDeviceInfoFile, multusPCI, multusDevInfo)
	}
	return list
}

// sriovNetwork and sriovIBNetwork mirror the SR-IOV operator's CRD schemas
// (sriovnetwork.openshift.io/v1) field for field, so strict decoding catches
// a misspelt or unsupported field as the API server would.
type sriovNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NetworkNamespace string `json:"networkNamespace"`
		ResourceName     string `json:"resourceName"`
		Capabilities     string `json:"capabilities"`
		IPAM             string `json:"ipam"`
		Vlan             int    `json:"vlan"`
		VlanQoS          int    `json:"vlanQoS"`
		SpoofChk         string `json:"spoofChk"`
		Trust            string `json:"trust"`
		AllMulticast     string `json:"allMulticast"`
		LinkState        string `json:"linkState"`
		MinTxRate        *int   `json:"minTxRate"`
		MaxTxRate        *int   `json:"maxTxRate"`
		MetaPlugins      string `json:"metaPlugins"`
	} `json:"spec"`
}

type sriovIBNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NetworkNamespace string `json:"networkNamespace"`
		ResourceName     string `json:"resourceName"`
		Capabilities     string `json:"capabilities"`
		IPAM             string `json:"ipam"`
		LinkState        string `json:"linkState"`
		MetaPlugins      string `json:"metaPlugins"`
		InterfaceName    string `json:"interfaceName"`
		Pkey             string `json:"pkey"`
		ScanGUIDs        bool   `json:"scanGuids"`
	} `json:"spec"`
}

type nodePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ResourceName string            `json:"resourceName"`
		NodeSelector map[string]string `json:"nodeSelector"`
		Priority     int               `json:"priority"`
		MTU          int               `json:"mtu"`
		NumVfs       int               `json:"numVfs"`
		NicSelector  struct {
			Vendor      string   `json:"vendor"`
			DeviceID    string   `json:"deviceID"`
			RootDevices []string `json:"rootDevices"`
			PfNames     []string `json:"pfNames"`
			NetFilter   string   `json:"netFilter"`
		} `json:"nicSelector"`
		DeviceType        string `json:"deviceType"`
		IsRdma            bool   `json:"isRdma"`
		NeedVhostNet      bool   `json:"needVhostNet"`
		LinkType          string `json:"linkType"`
		ESwitchMode       string `json:"eSwitchMode"`
		VdpaType          string `json:"vdpaType"`
		ExcludeTopology   bool   `json:"excludeTopology"`
		ExternallyManaged bool   `json:"externallyManaged"`
	} `json:"spec"`
}

const operatorAPI = "sriovnetwork.openshift.io/v1"

// TestOperatorNetworks renders each SriovNetwork / SriovIBNetwork into the
// config the operator would put in its NAD (first plugin from the spec,
// metaPlugins appended verbatim) and checks it like a hand-written NAD, and
// that it configures our plugin exactly as the matching NAD example does.
func TestOperatorNetworks(t *testing.T) {
	prefix := resourcePrefix(t)
	for nadFile, want := range networks {
		t.Run(want.crFile, func(t *testing.T) {
			var (
				name, namespace, resource, ipam, linkState, metaPlugins string
				first                                                   map[string]any
			)
			switch want.types[0] {
			case "ib-sriov":
				var cr sriovIBNetwork
				mustDecode(t, want.crFile, &cr)
				checkTypeMeta(t, cr.TypeMeta, "SriovIBNetwork")
				s := cr.Spec
				name, namespace, resource, ipam, linkState, metaPlugins = cr.Name, s.NetworkNamespace, s.ResourceName, s.IPAM, s.LinkState, s.MetaPlugins
				first = map[string]any{"type": "ib-sriov", "link_state": linkState}
			case "sriov":
				var cr sriovNetwork
				mustDecode(t, want.crFile, &cr)
				checkTypeMeta(t, cr.TypeMeta, "SriovNetwork")
				s := cr.Spec
				name, namespace, resource, ipam, linkState, metaPlugins = cr.Name, s.NetworkNamespace, s.ResourceName, s.IPAM, s.LinkState, s.MetaPlugins
				for field, v := range map[string]string{"spoofChk": s.SpoofChk, "trust": s.Trust} {
					if v != "" && v != "on" && v != "off" {
						t.Errorf("%s %q is not on or off", field, v)
					}
				}
				first = map[string]any{"type": "sriov", "vlan": s.Vlan, "spoofchk": s.SpoofChk, "trust": s.Trust, "link_state": linkState}
			default:
				t.Fatalf("no operator CR kind for %s", want.types[0])
			}
			if !slices.Contains([]string{"", "auto", "enable", "disable"}, linkState) {
				t.Errorf("linkState %q is not auto, enable or disable", linkState)
			}
			if namespace == "" {
				t.Error("networkNamespace is empty: the NAD would land in the operator's namespace")
			}
			if full := prefix + "/" + resource; full != want.resource {
				t.Errorf("resource %s (prefix from %s), want %s as in %s", full, valuesFile, want.resource, nadFile)
			}
			if strings.Contains(resource, "/") {
				t.Errorf("resourceName %q has a prefix; the operator adds %s/", resource, prefix)
			}
			if err := json.Unmarshal([]byte(ipam), new(map[string]any)); err != nil {
				t.Errorf("ipam is not a JSON object: %v", err)
			}
			if strings.HasPrefix(strings.TrimSpace(metaPlugins), "[") {
				t.Fatal("metaPlugins is spliced into the plugin list as is: give objects, not an array")
			}
			first["ipam"] = json.RawMessage(ipam)
			firstJSON, err := json.Marshal(first)
			if err != nil {
				t.Fatal(err)
			}
			rendered := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[%s,%s]}`, name, firstJSON, metaPlugins)
			list := checkConfList(t, []byte(rendered), want)

			var nad nadv1.NetworkAttachmentDefinition
			mustDecode(t, nadFile, &nad)
			byHand, err := libcni.ConfListFromBytes([]byte(nad.Spec.Config))
			if err != nil {
				t.Fatal(err)
			}
			if name != nad.Name {
				t.Errorf("renders NAD %q, the example NAD is %q", name, nad.Name)
			}
			if a, b := canonical(t, list.Plugins[1].Bytes), canonical(t, byHand.Plugins[1].Bytes); a != b {
				t.Errorf("%s config differs between %s and %s:\n%s\n%s", pluginType, want.crFile, nadFile, a, b)
			}
		})
	}
}

func checkTypeMeta(t *testing.T, tm metav1.TypeMeta, kind string) {
	t.Helper()
	if tm.APIVersion != operatorAPI || tm.Kind != kind {
		t.Errorf("apiVersion/kind %s/%s, want %s/%s", tm.APIVersion, tm.Kind, operatorAPI, kind)
	}
}

func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestNodePolicies checks the policies providing each pool: the seed's setup
// is 8 VFs per PF, netdevice VFs with RDMA, and an explicit link type.
func TestNodePolicies(t *testing.T) {
	prefix := resourcePrefix(t)
	for nadFile, want := range networks {
		t.Run(want.policyFile, func(t *testing.T) {
			var p nodePolicy
			mustDecode(t, want.policyFile, &p)
			checkTypeMeta(t, p.TypeMeta, "SriovNetworkNodePolicy")
			s := p.Spec
			if full := prefix + "/" + s.ResourceName; full != want.resource {
				t.Errorf("provides %s, %s asks for %s", full, nadFile, want.resource)
			}
			if s.NumVfs != 8 {
				t.Errorf("numVfs %d, want 8 per PF", s.NumVfs)
			}
			if !s.IsRdma {
				t.Error("isRdma is false: the VFs would have no RDMA device")
			}
			if s.DeviceType != "netdevice" {
				t.Errorf("deviceType %q, want netdevice (vfio-pci VFs have no netdev to verify)", s.DeviceType)
			}
			if strings.ToUpper(s.LinkType) != want.wantLinkType {
				t.Errorf("linkType %q, want %s", s.LinkType, want.wantLinkType)
			}
			if s.NicSelector.Vendor != "15b3" || s.NicSelector.DeviceID == "" {
				t.Errorf("nicSelector %+v, want Mellanox (15b3) PFs selected by device ID", s.NicSelector)
			}
			if len(s.NicSelector.PfNames) > 0 {
				t.Errorf("nicSelector.pfNames %v: interface names are what changes on these nodes", s.NicSelector.PfNames)
			}
			if s.NodeSelector["feature.node.kubernetes.io/network-sriov.capable"] != "true" {
				t.Errorf("nodeSelector %v does not select SR-IOV capable nodes", s.NodeSelector)
			}
			if want.linkLayer == config.LinkLayerEthernet && s.MTU != want.mtu {
				t.Errorf("mtu %d, but %s expects %d on the VF", s.MTU, nadFile, want.mtu)
			}
		})
	}
}

// chartKeys are the top-level values of the network-operator chart (v25.x);
// Helm silently ignores any other key, so a typo would go unnoticed.
var chartKeys = []string{
	"nfd", "upgradeCRDs", "sriovNetworkOperator", "maintenanceOperator", "nicConfigurationOperator",
	"node-feature-discovery", "sriov-network-operator", "maintenance-operator-chart",
	"nic-configuration-operator-chart", "operator", "imagePullSecrets", "global",
}

func loadValues(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	mustDecode(t, valuesFile, &v)
	return v
}

// lookup walks nested maps: lookup(v, "a", "b") is v["a"]["b"].
func lookup(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func resourcePrefix(t testing.TB) string {
	t.Helper()
	p, _ := lookup(loadValues(t), "sriov-network-operator", "operator", "resourcePrefix").(string)
	if p == "" {
		t.Fatalf("%s sets no sriov-network-operator.operator.resourcePrefix", valuesFile)
	}
	return p
}

func TestNetworkOperatorValues(t *testing.T) {
	v := loadValues(t)
	for k := range v {
		if !slices.Contains(chartKeys, k) {
			t.Errorf("top-level key %q is not a value of the network-operator chart", k)
		}
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"nfd", "enabled"}, true},
		{[]string{"sriovNetworkOperator", "enabled"}, true},
		{[]string{"sriov-network-operator", "operator", "resourcePrefix"}, "nvidia.com"},
		{[]string{"sriov-network-operator", "sriovOperatorConfig", "deploy"}, true},
		{[]string{"sriov-network-operator", "sriovOperatorConfig", "configDaemonNodeSelector", "network.nvidia.com/operator.mofed.wait"}, "false"},
	} {
		if got := lookup(v, c.path...); got != c.want {
			t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	for _, path := range [][]string{{"node-feature-discovery", "worker", "tolerations"}, {"operator", "tolerations"}} {
		if !toleratesGPU(lookup(v, path...)) {
			t.Errorf("%s does not tolerate the nvidia.com/gpu taint", strings.Join(path, "."))
		}
	}
}

func toleratesGPU(v any) bool {
	list, _ := v.([]any)
	for _, item := range list {
		if lookup(item, "key") == "nvidia.com/gpu" && lookup(item, "operator") == "Exists" {
			return true
		}
	}
	return false
}
