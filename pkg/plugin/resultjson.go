package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk"
)

// resultKeys are current.Result's JSON keys and fields, interfaceKeys
// current.Interface's; tests keep them equal to the structs' own.
var (
	resultKeys = jsonwalk.NewTable(
		jsonwalk.Key("cniVersion", func(r *current.Result) any { return &r.CNIVersion }),
		jsonwalk.Key("interfaces", func(r *current.Result) any { return (*interfaceList)(&r.Interfaces) }),
		jsonwalk.Key("ips", func(r *current.Result) any { return &r.IPs }),
		jsonwalk.Key("routes", func(r *current.Result) any { return &r.Routes }),
		jsonwalk.Key("dns", func(r *current.Result) any { return &r.DNS }),
	)
	interfaceKeys = jsonwalk.NewTable(
		jsonwalk.Key("name", func(i *current.Interface) any { return &i.Name }),
		jsonwalk.Key("mac", func(i *current.Interface) any { return &i.Mac }),
		jsonwalk.Key("mtu", func(i *current.Interface) any { return &i.Mtu }),
		jsonwalk.Key("sandbox", func(i *current.Interface) any { return &i.Sandbox }),
		jsonwalk.Key("socketPath", func(i *current.Interface) any { return &i.SocketPath }),
		jsonwalk.Key("pciID", func(i *current.Interface) any { return &i.PciID }),
	)
)

// decodeResult fills res from a prevResult as json.Unmarshal would, key by
// key (see jsonwalk), its interfaces too: in a fresh process encoding/json
// spent ~60 µs here building those two structs' field tables. IPs, routes
// and DNS go through encoding/json: IPs and routes decode themselves.
func decodeResult(data []byte, res *current.Result) error {
	return jsonwalk.Object(data, "types100.Result", func(key string) any { return resultKeys.Field(res, key) })
}

// interfaceList decodes a result's interfaces as json.Unmarshal decodes a
// []*current.Interface: elements decode into those already there, null
// ones are nil, and the list ends where the array does.
type interfaceList []*current.Interface

func (l *interfaceList) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case nil:
		*l = nil
		return nil
	case json.Delim('['):
	default:
		return fmt.Errorf("json: cannot unmarshal %v into Go value of type []*types100.Interface", tok)
	}
	list := *l
	n := 0
	for ; dec.More(); n++ {
		if n == len(list) {
			list = append(list, nil)
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case nil:
			list[n] = nil
			continue
		case json.Delim('{'):
		default:
			return fmt.Errorf("json: cannot unmarshal %v into Go value of type types100.Interface", tok)
		}
		if list[n] == nil {
			list[n] = &current.Interface{}
		}
		iface := list[n]
		if err := jsonwalk.Fields(dec, func(key string) any { return interfaceKeys.Field(iface, key) }); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return err
	}
	if list == nil {
		list = []*current.Interface{} // [] is an empty list, not a missing one
	}
	*l = list[:n]
	return nil
}
