package state

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// reflective has Record's fields and tags but not its MarshalJSON, so
// encoding/json encodes it by reflection.
type reflective Record

// fullRecord sets every field of Record; the test fails when one is zero,
// so a field added to Record must be added here and so to MarshalJSON.
func fullRecord(s string) Record {
	return Record{
		Version: 1, Network: "net-" + s, ContainerID: s, IfName: s, Netns: "/var/run/netns/" + s, PCI: s, PF: s,
		VFIndex: 7, AltName: s, AddedAltName: true, FoundAs: s, MAC: s, MTU: 4092, LinkLayer: s, NodeGUID: s,
		RDMA: []string{s, "mlx5_" + s}, PortPolicy: s, GUIDPolicy: s, SysfsRoot: s,
		Created: time.Date(2026, 12, 3, 6, 5, 4, 123456789, time.UTC),
	}
}

func TestRecordJSONMatchesReflection(t *testing.T) {
	v := reflect.ValueOf(fullRecord("x"))
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fullRecord leaves %s zero: set it, and encode it in MarshalJSON", v.Type().Field(i).Name)
		}
	}
	strs := []string{"", "plain", `q"uote`, `back\slash`, "<a>&b", "\b\f\n\r\t", "\x00\x01\x1f\x7f", "é ü 漢",
		"\xff\xfe bad utf-8 \xc3", "line\u2028para\u2029", "emoji 🙂", "/var/run/netns/cni-1234"}
	recs := []Record{{}, {Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))}}
	for _, s := range strs {
		recs = append(recs, fullRecord(s))
	}
	for _, r := range recs {
		want, err := json.Marshal((*reflective)(&r))
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON(%+v): %v", r, err)
		}
		if string(got) != string(want) {
			t.Errorf("MarshalJSON differs from encoding/json:\n got %s\nwant %s", got, want)
		}
		via, err := json.Marshal(r)
		if err != nil || string(via) != string(want) {
			t.Errorf("json.Marshal(Record) = %s, %v; want %s", via, err, want)
		}
	}
}

func TestRecordJSONRejectsWhatEncodingJSONRejects(t *testing.T) {
	r := fullRecord("x")
	r.Created = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := r.MarshalJSON(); err == nil {
		t.Error("MarshalJSON accepted a time outside year 0..9999")
	}
}
