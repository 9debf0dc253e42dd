package plugin

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// ourInterface finds the index of this attachment's entry in a result: an
// interface in the pod's sandbox (or with no sandbox) whose pciID, name or
// MAC says it is ours. -1 when there is none.
func ourInterface(res *current.Result, netns, ifName, pci, mac string) int {
	best := -1
	for i, iface := range res.Interfaces {
		if iface.Sandbox != "" && iface.Sandbox != netns {
			continue
		}
		switch {
		case pci != "" && iface.PciID == pci:
			return i
		case iface.Name == ifName, mac != "" && strings.EqualFold(iface.Mac, mac):
			if best < 0 {
				best = i
			}
		}
	}
	return best
}

// correctResult returns the chain's result with this attachment's interface
// entry set to what the pod really holds, appended when the plugins before
// us left none. Appending keeps every IP's interface index valid.
func correctResult(prev *current.Result, want current.Interface) *current.Result {
	res := *prev
	res.Interfaces = make([]*current.Interface, len(prev.Interfaces))
	for i, iface := range prev.Interfaces {
		c := *iface
		res.Interfaces[i] = &c
	}
	i := ourInterface(&res, want.Sandbox, want.Name, want.PciID, want.Mac)
	if i < 0 {
		res.Interfaces = append(res.Interfaces, &want)
		return &res
	}
	entry := res.Interfaces[i]
	entry.Name, entry.Mac, entry.Mtu, entry.Sandbox, entry.PciID = want.Name, want.Mac, want.Mtu, want.Sandbox, want.PciID
	return &res
}

// printResult writes res to stdout as cniVersion ver, as types.PrintResult
// does. A current.Result is encoded in one pass (encodeResult): the
// library's encoder marshals it, decodes that into a map and marshals the
// map again, only to drop an empty "dns". The JSON differs only in key
// order. Older versions go through the library's conversion.
func printResult(res *current.Result, ver string) error {
	if res.CNIVersion != ver || !slices.Contains(resultVersions, ver) {
		return types.PrintResult(res, ver)
	}
	out, err := encodeResult(res)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// encodeResult is res as printResult writes it: its fields by hand, with
// current.Result's and current.Interface's omitempty rules, an empty DNS
// left out; IPs, routes and a DNS go through their own encoders. Built by
// reflection, the two structs' encoders cost ~50 µs of a fresh process.
func encodeResult(res *current.Result) ([]byte, error) {
	b := make([]byte, 0, 512)
	b = append(b, '{')
	sep := func(name string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
	}
	if res.CNIVersion != "" {
		sep("cniVersion")
		b = appendJSONString(b, res.CNIVersion)
	}
	if len(res.Interfaces) > 0 {
		sep("interfaces")
		b = append(b, '[')
		for i, iface := range res.Interfaces {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendInterface(b, iface)
		}
		b = append(b, ']')
	}
	for _, v := range []struct {
		name  string
		value any
		set   bool
	}{
		{"ips", res.IPs, len(res.IPs) > 0},
		{"routes", res.Routes, len(res.Routes) > 0},
		{"dns", res.DNS, !res.DNS.IsEmpty()},
	} {
		if !v.set {
			continue
		}
		raw, err := json.Marshal(v.value)
		if err != nil {
			return nil, err
		}
		sep(v.name)
		b = append(b, raw...)
	}
	b = append(b, '}')
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "    "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// appendInterface appends an interface entry as encoding/json would.
func appendInterface(b []byte, iface *current.Interface) []byte {
	if iface == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"name":`...)
	b = appendJSONString(b, iface.Name)
	b = appendOptional(b, "mac", iface.Mac)
	if iface.Mtu != 0 {
		b = append(b, `,"mtu":`...)
		b = strconv.AppendInt(b, int64(iface.Mtu), 10)
	}
	b = appendOptional(b, "sandbox", iface.Sandbox)
	b = appendOptional(b, "socketPath", iface.SocketPath)
	b = appendOptional(b, "pciID", iface.PciID)
	return append(b, '}')
}

// appendOptional appends `,"name":value` unless value is empty.
func appendOptional(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	b = append(b, ',')
	b = appendJSONString(b, name)
	b = append(b, ':')
	return appendJSONString(b, value)
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes strings (it encodes a lone string without reflection).
func appendJSONString(b []byte, s string) []byte {
	raw, _ := json.Marshal(s) // a string always encodes
	return append(b, raw...)
}
