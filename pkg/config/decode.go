package config

import "github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk"

// confFields names each top-level key of a network configuration and the
// field of NetConf it fills: the JSON names of NetConf's fields, the
// embedded PluginConf's included (prevResult is NetConf's own). A test
// keeps the list equal to what encoding/json finds in the struct.
var confFields = []struct {
	name  string
	field func(*NetConf) any
}{
	{"cniVersion", func(c *NetConf) any { return &c.CNIVersion }},
	{"name", func(c *NetConf) any { return &c.Name }},
	{"type", func(c *NetConf) any { return &c.Type }},
	{"capabilities", func(c *NetConf) any { return &c.Capabilities }},
	{"ipam", func(c *NetConf) any { return &c.IPAM }},
	{"dns", func(c *NetConf) any { return &c.DNS }},
	{"cni.dev/valid-attachments", func(c *NetConf) any { return &c.ValidAttachments }},
	{"prevResult", func(c *NetConf) any { return &c.PrevResult }},
	{"deviceID", func(c *NetConf) any { return &c.DeviceID }},
	{"pciBusID", func(c *NetConf) any { return &c.PCIBusID }},
	{"runtimeConfig", func(c *NetConf) any { return &c.RuntimeConfig }},
	{"altName", func(c *NetConf) any { return &c.AltName }},
	{"linkLayer", func(c *NetConf) any { return &c.LinkLayer }},
	{"guidPolicy", func(c *NetConf) any { return &c.GUIDPolicy }},
	{"portPolicy", func(c *NetConf) any { return &c.PortPolicy }},
	{"portWaitMs", func(c *NetConf) any { return &c.PortWaitMs }},
	{"mtu", func(c *NetConf) any { return &c.MTU }},
	{"stateDir", func(c *NetConf) any { return &c.StateDir }},
	{"sysfsRoot", func(c *NetConf) any { return &c.SysfsRoot }},
	{"logFile", func(c *NetConf) any { return &c.LogFile }},
	{"logLevel", func(c *NetConf) any { return &c.LogLevel }},
}

// confNames are confFields' names, in order, for jsonwalk.Match.
var confNames = func() []string {
	names := make([]string, len(confFields))
	for i, f := range confFields {
		names[i] = f.name
	}
	return names
}()

// confField is the field a key fills, matched as encoding/json matches
// keys; nil for a key the plugin does not know.
func confField(c *NetConf, key string) any {
	if i := jsonwalk.Match(confNames, key); i >= 0 {
		return confFields[i].field(c)
	}
	return nil
}

// decodeConf fills c from data as json.Unmarshal would (see jsonwalk):
// encoding/json would first build NetConf's field table by reflection, and
// in a fresh process, as every plugin run is, that alone cost ~0.1 ms here,
// twice the rest of the decoding.
func decodeConf(data []byte, c *NetConf) error {
	return jsonwalk.Object(data, "config.NetConf", func(key string) any { return confField(c, key) })
}
