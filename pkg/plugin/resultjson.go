package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk"
)

// resultKeys are current.Result's JSON keys, interfaceKeys
// current.Interface's; tests keep them equal to the structs' own.
var (
	resultKeys    = []string{"cniVersion", "interfaces", "ips", "routes", "dns"}
	interfaceKeys = []string{"name", "mac", "mtu", "sandbox", "socketPath", "pciID"}
)

// decodeResult fills res from a prevResult as json.Unmarshal would, key by
// key (see jsonwalk), its interfaces too: in a fresh process encoding/json
// spent ~60 µs here building those two structs' field tables. IPs, routes
// and DNS go through encoding/json: IPs and routes decode themselves.
func decodeResult(data []byte, res *current.Result) error {
	return jsonwalk.Object(data, "types100.Result", func(key string) any {
		switch jsonwalk.Match(resultKeys, key) {
		case 0:
			return &res.CNIVersion
		case 1:
			return (*interfaceList)(&res.Interfaces)
		case 2:
			return &res.IPs
		case 3:
			return &res.Routes
		case 4:
			return &res.DNS
		}
		return nil
	})
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
		if err := jsonwalk.Fields(dec, func(key string) any {
			switch jsonwalk.Match(interfaceKeys, key) {
			case 0:
				return &iface.Name
			case 1:
				return &iface.Mac
			case 2:
				return &iface.Mtu
			case 3:
				return &iface.Sandbox
			case 4:
				return &iface.SocketPath
			case 5:
				return &iface.PciID
			}
			return nil
		}); err != nil {
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
