package plugin

import (
	"encoding/json"
	"slices"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

var fuzzVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// FuzzCorrectResult feeds arbitrary prevResults, in every CNI version,
// through the same parsing ADD uses and then through correctResult. The
// correction must not panic, must not change prevResult, must leave exactly
// one entry that is ours with what the pod holds, keep every other entry and
// every IP as they were, and never make a printable result unprintable.
func FuzzCorrectResult(f *testing.F) {
	seeds := []string{
		`{"cniVersion":"1.1.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01","sandbox":"/var/run/netns/p","pciID":"0000:18:00.2"}],` +
			`"ips":[{"address":"10.0.0.2/24","interface":0}]}`,
		`{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/p"},{"name":"net1","mac":"02:00:00:00:00:01"}],` +
			`"ips":[{"version":"4","address":"10.0.0.2/24","interface":1},{"version":"6","address":"fd00::2/64"}]}`,
		`{"cniVersion":"0.3.0","interfaces":[{"name":"net1","sandbox":"/var/run/netns/other"}],"ips":[{"version":"4","address":"10.0.0.2/24","interface":7}]}`,
		`{"cniVersion":"1.0.0","interfaces":[],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.0.0.1"]}}`,
		`{"interfaces":[{"name":"","mac":"00:00:10:49:FE:80:00:00:00:00:00:00:A2:88:C2:FF:FE:18:00:00"}]}`,
		`{}`,
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint8(i), "net1", "/var/run/netns/p", "0000:18:00.2", "02:00:00:00:00:01")
	}
	f.Add([]byte(seeds[1]), uint8(2), "net1", "/var/run/netns/p", "", "02:00:00:00:00:01")
	f.Add([]byte(seeds[4]), uint8(4), "", "", "", "00:00:10:49:fe:80:00:00:00:00:00:00:a2:88:c2:ff:fe:18:00:00")
	f.Fuzz(func(t *testing.T, prevJSON []byte, v uint8, ifName, netns, pci, mac string) {
		prev := fuzzParsePrev(prevJSON, fuzzVersions[int(v)%len(fuzzVersions)])
		if prev == nil {
			return
		}
		before, err := json.Marshal(prev)
		if err != nil {
			t.Fatalf("marshal prevResult: %v", err)
		}
		want := current.Interface{Name: ifName, Mac: mac, Mtu: 1500, Sandbox: netns, PciID: pci}
		res := correctResult(prev, want)

		if after, _ := json.Marshal(prev); string(after) != string(before) {
			t.Fatalf("correctResult changed prevResult:\nbefore %s\nafter  %s", before, after)
		}
		n := len(prev.Interfaces)
		if len(res.Interfaces) != n && len(res.Interfaces) != n+1 {
			t.Fatalf("%d interfaces became %d", n, len(res.Interfaces))
		}
		i := ourInterface(res, netns, ifName, pci, mac)
		if i < 0 || *res.Interfaces[i] != want {
			t.Fatalf("our entry is not what the pod holds: index %d in %s", i, fuzzJSON(res))
		}
		if len(res.Interfaces) == n+1 && i != n {
			t.Fatalf("an entry was appended, but ours is %d of %d", i, n+1)
		}
		for j, iface := range prev.Interfaces {
			if j != i && *res.Interfaces[j] != *iface {
				t.Fatalf("entry %d changed: %+v became %+v", j, *iface, *res.Interfaces[j])
			}
		}
		if !slices.EqualFunc(prev.IPs, res.IPs, func(a, b *current.IPConfig) bool { return a.String() == b.String() }) {
			t.Fatalf("IPs changed: %s", fuzzJSON(res))
		}
		for _, out := range fuzzVersions {
			if _, perr := prev.GetAsVersion(out); perr != nil {
				continue
			}
			if _, err := res.GetAsVersion(out); err != nil {
				t.Fatalf("prevResult converts to %s, the corrected result does not: %v", out, err)
			}
		}
	})
}

// fuzzParsePrev parses a prevResult the way ADD does, or returns nil when
// ADD would reject it.
func fuzzParsePrev(data []byte, cniVersion string) *current.Result {
	var raw map[string]any
	if json.Unmarshal(data, &raw) != nil || raw == nil {
		return nil
	}
	conf := &config.NetConf{}
	conf.CNIVersion = cniVersion
	conf.RawPrevResult = raw
	prev, err := parsePrevResult(conf)
	if err != nil {
		return nil
	}
	return prev
}

func fuzzJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
