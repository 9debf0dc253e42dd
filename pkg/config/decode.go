package config

import "github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk"

// confKeys names each top-level key of a network configuration and the
// field of NetConf it fills: the JSON names of NetConf's fields, the
// embedded PluginConf's included (prevResult is NetConf's own). A test
// keeps the list equal to what encoding/json finds in the struct.
var confKeys = jsonwalk.NewTable(
	jsonwalk.Key("cniVersion", func(c *NetConf) any { return &c.CNIVersion }),
	jsonwalk.Key("name", func(c *NetConf) any { return &c.Name }),
	jsonwalk.Key("type", func(c *NetConf) any { return &c.Type }),
	jsonwalk.Key("capabilities", func(c *NetConf) any { return &c.Capabilities }),
	jsonwalk.Key("ipam", func(c *NetConf) any { return &c.IPAM }),
	jsonwalk.Key("dns", func(c *NetConf) any { return &c.DNS }),
	jsonwalk.Key("cni.dev/valid-attachments", func(c *NetConf) any { return &c.ValidAttachments }),
	jsonwalk.Key("prevResult", func(c *NetConf) any { return &c.PrevResult }),
	jsonwalk.Key("deviceID", func(c *NetConf) any { return &c.DeviceID }),
	jsonwalk.Key("pciBusID", func(c *NetConf) any { return &c.PCIBusID }),
	jsonwalk.Key("runtimeConfig", func(c *NetConf) any { return &c.RuntimeConfig }),
	jsonwalk.Key("altName", func(c *NetConf) any { return &c.AltName }),
	jsonwalk.Key("linkLayer", func(c *NetConf) any { return &c.LinkLayer }),
	jsonwalk.Key("guidPolicy", func(c *NetConf) any { return &c.GUIDPolicy }),
	jsonwalk.Key("portPolicy", func(c *NetConf) any { return &c.PortPolicy }),
	jsonwalk.Key("portWaitMs", func(c *NetConf) any { return &c.PortWaitMs }),
	jsonwalk.Key("mtu", func(c *NetConf) any { return &c.MTU }),
	jsonwalk.Key("stateDir", func(c *NetConf) any { return &c.StateDir }),
	jsonwalk.Key("sysfsRoot", func(c *NetConf) any { return &c.SysfsRoot }),
	jsonwalk.Key("logFile", func(c *NetConf) any { return &c.LogFile }),
	jsonwalk.Key("logLevel", func(c *NetConf) any { return &c.LogLevel }),
)

// decodeConf fills c from data as json.Unmarshal would (see jsonwalk):
// encoding/json would first build NetConf's field table by reflection, and
// in a fresh process, as every plugin run is, that alone cost ~0.1 ms here,
// twice the rest of the decoding.
func decodeConf(data []byte, c *NetConf) error {
	return jsonwalk.Object(data, "config.NetConf", func(key string) any { return confKeys.Field(c, key) })
}
