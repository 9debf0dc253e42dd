package plugin

import (
	"reflect"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk/jsonwalktest"
)

// structKeys lists a struct type's JSON keys in field order.
func structKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = t.Field(i).Name
		}
		keys = append(keys, name)
	}
	return keys
}

// TestResultKeysMatchStructs: decodeResult knows exactly the keys
// encoding/json would decode into current.Result and current.Interface.
func TestResultKeysMatchStructs(t *testing.T) {
	if diff := cmp.Diff(structKeys(reflect.TypeFor[current.Result]()), resultKeys.Names()); diff != "" {
		t.Errorf("resultKeys (-struct +ours):\n%s", diff)
	}
	if diff := cmp.Diff(structKeys(reflect.TypeFor[current.Interface]()), interfaceKeys.Names()); diff != "" {
		t.Errorf("interfaceKeys (-struct +ours):\n%s", diff)
	}
}

// resultCorpus probes where a key-by-key decoder could part from
// json.Unmarshal: case-folded and repeated keys (repeated interfaces merge
// into the ones already decoded), nulls, empty lists, unknown keys, wrong
// types, trailing bytes.
var resultCorpus = []string{
	`{}`, `null`, `[]`, `"x"`, `{"cniVersion":"1.1.0"} x`,
	`{"cniVersion":"1.1.0","interfaces":[{"name":"net1","mac":"00:11:22:33:44:55","mtu":4092,"sandbox":"/var/run/netns/x","socketPath":"/s","pciID":"0000:18:00.2"}],"ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}],"dns":{"nameservers":["10.96.0.10"]}}`,
	`{"interfaces":[]}`, `{"interfaces":null}`, `{"interfaces":[null,{"name":"a"},null]}`,
	`{"interfaces":[{"name":"a","mac":"m"},{"name":"b"}],"interfaces":[{"name":"c"}]}`,
	`{"interfaces":[{"name":"a"}],"interfaces":[null]}`,
	`{"Interfaces":[{"NAME":"a","PciId":"0000:18:00.2","name":"b"}],"CNIVERSION":"1.0.0"}`,
	`{"interfaces":[{"name":"a","mtu":"x"}]}`, `{"interfaces":{}}`, `{"interfaces":[1]}`, `{"interfaces":[[]]}`,
	`{"interfaces":[{"name":"a","extra":{"deep":[1,{"x":null}]}}],"unknown":true}`,
	`{"ips":[{"address":"10.0.0.300/24"}]}`, `{"ips":"x"}`, `{"routes":[{"dst":"nope"}]}`, `{"dns":7}`,
	`{"cniVersion":1}`, `{"interfaces":[{"name":"a"}`, `{"interfaces":[{"name":"a"}]]}`, `{"interfaces":[{"name":"\u00e9\ud800"}]}`,
}

func TestDecodeResultAgreesWithUnmarshal(t *testing.T) {
	for _, in := range resultCorpus {
		checkDecodeResult(t, []byte(in))
	}
}

func checkDecodeResult(t *testing.T, in []byte) {
	t.Helper()
	jsonwalktest.AgreesWithUnmarshal(t, in, func() *current.Result { return &current.Result{CNIVersion: "1.1.0"} }, decodeResult)
}

// FuzzDecodeResult: decodeResult agrees with json.Unmarshal on any input.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range resultCorpus {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkDecodeResult(t, in) })
}
