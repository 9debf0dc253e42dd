package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/jsonwalk/jsonwalktest"
)

// jsonNames lists the keys encoding/json decodes into a struct type: tag
// names (or field names), embedded structs' fields included unless a
// shallower field has the same name, "-" left out.
func jsonNames(t reflect.Type, taken map[string]bool) []string {
	var names, embedded []string
	var inner []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct && tag == "" {
			inner = append(inner, f.Type)
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	for _, n := range names {
		taken[n] = true
	}
	for _, it := range inner {
		for _, n := range jsonNames(it, taken) {
			if !slices.Contains(names, n) {
				embedded = append(embedded, n)
			}
		}
	}
	return append(names, embedded...)
}

// TestConfKeysCoverNetConf: decodeConf knows every key encoding/json
// would decode into NetConf, and no other.
func TestConfKeysCoverNetConf(t *testing.T) {
	want := jsonNames(reflect.TypeFor[NetConf](), map[string]bool{})
	got := slices.Clone(confKeys.Names())
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(slices.Compact(want), got); diff != "" {
		t.Errorf("confKeys differ from NetConf's JSON keys (-struct +confKeys):\n%s", diff)
	}
	// Each entry points at a field of its own.
	var c NetConf
	seen := map[any]string{}
	for _, name := range confKeys.Names() {
		p := reflect.ValueOf(confKeys.Field(&c, name)).Pointer()
		if other, dup := seen[p]; dup {
			t.Errorf("%s and %s fill the same field", other, name)
		}
		seen[p] = name
	}
}

// decodeCorpus holds configurations that probe where a hand-driven decoder
// could part from json.Unmarshal: case-folded and repeated keys, nulls,
// unknown and nested values, wrong types, escapes, trailing bytes, other
// top-level values.
var decodeCorpus = []string{
	fuzzBase,
	`{}`, `null`, `[]`, `7`, `"x"`, `true`, ` {"name":"n"} `, `{"name":"n"} {}`, `{"name":"n"}]`, `{"name":"n"`,
	`{"cniVersion":"1.1.0","name":"n","type":"sriov-stable-cni","deviceID":"0000:18:00.2","mtu":4092,"portWaitMs":300}`,
	`{"DeviceId":"0000:18:00.2","NAME":"n","Mtu":9000,"deviceID":"0000:18:00.3"}`,
	`{"deviceID":"0000:18:00.3","DEVICEID":"0000:18:00.4"}`,
	`{"name":"a","name":"b"}`,
	`{"portWaitMs":null,"mtu":null,"name":null,"prevResult":null}`,
	`{"portWaitMs":5,"portWaitMs":null}`,
	`{"runtimeConfig":{"deviceID":"0000:18:00.2","CNIDeviceInfoFile":"/var/run/x.json","other":[1,2]}}`,
	`{"capabilities":{"deviceID":true},"ipam":{"type":"host-local"},"dns":{"nameservers":["10.0.0.1"]}}`,
	`{"cni.dev/valid-attachments":[{"containerID":"c","ifname":"net1"}]}`,
	`{"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"net1"}]} , "x":{"y":[{"z":null}]}}`,
	`{"\u006eame":"escaped","ünknown":1,"K":2}`,
	`{"mtu":"9000"}`, `{"mtu":1.5}`, `{"mtu":99999999999999999999}`, `{"name":7}`, `{"runtimeConfig":"x"}`,
	`{"guidPolicy":true}`, `{"prevResult":"net1"}`, `{"capabilities":[]}`, `{"unknown":[}`, `{"name":"n",}`,
	`{"name":"\ud800"}`, "{\"name\":\"\xff\"}",
}

// TestDecodeConfAgreesWithUnmarshal: over the corpus, decodeConf accepts
// exactly what json.Unmarshal accepts and fills NetConf the same way.
func TestDecodeConfAgreesWithUnmarshal(t *testing.T) {
	for _, in := range decodeCorpus {
		checkDecodeConf(t, []byte(in))
	}
}

func checkDecodeConf(t *testing.T, in []byte) {
	t.Helper()
	jsonwalktest.AgreesWithUnmarshal(t, in, func() *NetConf { return &NetConf{} }, decodeConf)
}

// FuzzDecodeConf: decodeConf agrees with json.Unmarshal on any input.
func FuzzDecodeConf(f *testing.F) {
	for _, s := range decodeCorpus {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkDecodeConf(t, in) })
}
