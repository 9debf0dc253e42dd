package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

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

// confField is the field a key fills, matched as encoding/json matches
// keys: exactly, else ignoring case; nil for a key the plugin does not know.
func confField(c *NetConf, key string) any {
	for _, f := range confFields {
		if f.name == key {
			return f.field(c)
		}
	}
	for _, f := range confFields {
		if strings.EqualFold(f.name, key) {
			return f.field(c)
		}
	}
	return nil
}

// decodeConf fills c from data as json.Unmarshal would, key by key in
// document order (a repeated key's last value wins, unknown keys are
// skipped), each value decoded into its field. encoding/json would first
// build NetConf's field table by reflection: in a fresh process, as every
// plugin run is, that alone cost ~0.1 ms here, twice the rest of the
// decoding. A wrong type is reported with its key.
func decodeConf(data []byte, c *NetConf) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
	case nil: // null leaves the configuration as it is, as json.Unmarshal does
		return expectEnd(dec)
	default:
		return fmt.Errorf("json: cannot unmarshal %s into Go value of type config.NetConf", jsonKind(tok))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string) // Token fails on a key that is not a string
		if !ok {
			return fmt.Errorf("json: object key %v is not a string", tok)
		}
		if f := confField(c, key); f != nil {
			if err := dec.Decode(f); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	return expectEnd(dec)
}

// expectEnd fails on anything but white space after the top-level value.
func expectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("invalid character after top-level value")
		}
		return err
	}
	return nil
}

// jsonKind names a JSON token's kind as encoding/json's errors do.
func jsonKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
}
