package plugin

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile/safefiletest"
	"github.com/sriov-stable-cni/sriov-stable-cni/internal/testutil"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/rdma"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/sysfs"
)

func parseConf(t *testing.T, stdin string) *config.NetConf {
	t.Helper()
	conf, err := config.Parse([]byte(stdin), config.RootsFrom(os.TempDir()))
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, stdin)
	}
	return conf
}

func devInfo(typ, addr string) string {
	b, _ := json.Marshal(map[string]any{
		"type": typ, "version": "1.1.0",
		"pci": map[string]any{"pci-address": addr, "pf-pci-address": "0000:18:00.0", "rdma-device": "mlx5_10"},
	})
	return string(b)
}

func TestResolvePCI(t *testing.T) {
	good := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", devInfo("pci", "0000:18:00.4"))
	upper := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", devInfo("pci", "0000:AF:00.4"))
	wrongType := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa:0000:65:00.3"}}`)
	garbage := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", "this is not JSON")
	empty := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", "")
	noAddr := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", `{"type":"pci","version":"1.1.0","pci":{}}`)
	badAddr := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", devInfo("pci", "../../../etc"))
	// Exactly the limit is read; one byte more is refused unread.
	atLimit := devInfo("pci", "0000:18:00.5")
	atLimit = testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", atLimit+strings.Repeat(" ", maxDeviceInfoSize-len(atLimit)))
	tooLarge := devInfo("pci", "0000:18:00.5")
	tooLarge = testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", tooLarge+strings.Repeat(" ", maxDeviceInfoSize+1-len(tooLarge)))
	missing := filepath.Join(t.TempDir(), "gone.json")
	aDir := t.TempDir()

	prevWithPCI := func(sandbox, name, pci string) *current.Result {
		return &current.Result{CNIVersion: "1.1.0", Interfaces: []*current.Interface{
			{Name: "eth0", Sandbox: sandbox, PciID: "0000:99:00.1"},
			{Name: name, Sandbox: sandbox, PciID: pci},
		}}
	}
	rc := func(file string) string { return `"runtimeConfig": {"CNIDeviceInfoFile": "` + file + `"}` }

	tests := []struct {
		name     string
		conf     string // fields added to the base configuration
		prev     *current.Result
		wantAddr string
		wantFrom string
		errField string // non-empty: an error naming this field is expected
	}{
		{"deviceID first", `"deviceID": "0000:18:00.2", "pciBusID": "0000:18:00.3", ` + rc(good),
			prevWithPCI(podNetns, "net1", "0000:18:00.6"), "0000:18:00.2", "deviceID", ""},
		{"pciBusID", `"pciBusID": "0000:18:00.3", ` + rc(good), nil, "0000:18:00.3", "pciBusID", ""},
		{"runtimeConfig.deviceID", `"runtimeConfig": {"deviceID": "0000:18:00.7", "CNIDeviceInfoFile": "` + good + `"}`,
			nil, "0000:18:00.7", "runtimeConfig.deviceID", ""},
		{"device info file before prevResult", rc(good), prevWithPCI(podNetns, "net1", "0000:18:00.6"),
			"0000:18:00.4", "runtimeConfig.CNIDeviceInfoFile", ""},
		{"device info file upper case normalized", rc(upper), nil, "0000:af:00.4", "runtimeConfig.CNIDeviceInfoFile", ""},
		{"device info file at the size limit", rc(atLimit), nil, "0000:18:00.5", "runtimeConfig.CNIDeviceInfoFile", ""},
		{"device info file of the wrong type", rc(wrongType), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file garbage", rc(garbage), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file empty", rc(empty), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file without address", rc(noAddr), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file with a path for an address", rc(badAddr), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file too large", rc(tooLarge), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file missing", rc(missing), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"device info file is a directory", rc(aDir), nil, "", "", "runtimeConfig.CNIDeviceInfoFile"},
		// A broken device info file is an error even when prevResult could
		// answer: the runtime said where the address is.
		{"broken device info file does not fall back", rc(missing), prevWithPCI(podNetns, "net1", "0000:18:00.6"),
			"", "", "runtimeConfig.CNIDeviceInfoFile"},
		{"prevResult pciID", "", prevWithPCI(podNetns, "net1", "0000:18:00.6"), "0000:18:00.6", "prevResult pciID", ""},
		{"prevResult pciID normalized", "", prevWithPCI(podNetns, "net1", "0000:AF:00.6"), "0000:af:00.6", "prevResult pciID", ""},
		{"prevResult pciID without sandbox", "", prevWithPCI("", "net1", "0000:18:00.6"), "0000:18:00.6", "prevResult pciID", ""},
		{"prevResult pciID malformed", "", prevWithPCI(podNetns, "net1", "18:00.6"), "", "", "prevResult pciID"},
		{"prevResult entry in another sandbox", "", prevWithPCI(otherNetns, "net1", "0000:18:00.6"), "", "", "deviceID"},
		{"prevResult entry for another ifname", "", prevWithPCI(podNetns, "net2", "0000:18:00.6"), "", "", "deviceID"},
		{"prevResult entry without pciID", "", prevWithPCI(podNetns, "net1", ""), "", "", "deviceID"},
		{"nothing at all", "", nil, "", "", "deviceID"},
		{"empty prevResult", "", &current.Result{CNIVersion: "1.1.0"}, "", "", "deviceID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdin := `{"cniVersion": "1.1.0", "name": "ib-net", "type": "sriov-stable-cni"`
			if tc.conf != "" {
				stdin += ", " + tc.conf
			}
			conf := parseConf(t, stdin+"}")
			addr, from, err := resolvePCI(conf, tc.prev, podNetns, "net1")
			if tc.errField != "" {
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Fatalf("resolvePCI = %q from %q, %v; want a config.Error naming %s", addr, from, err, tc.errField)
				}
				if !strings.HasPrefix(ce.Field, tc.errField) {
					t.Errorf("error names field %q, want %q (%v)", ce.Field, tc.errField, err)
				}
				return
			}
			if err != nil || addr != tc.wantAddr || from != tc.wantFrom {
				t.Errorf("resolvePCI = %q from %q, %v; want %q from %q", addr, from, err, tc.wantAddr, tc.wantFrom)
			}
		})
	}
}

// TestResolvePCIErrorNamesFile checks an operator can see which device info
// file was wrong.
func TestResolvePCIErrorNamesFile(t *testing.T) {
	path := testutil.WriteTemp(t, "ib-net-net1-deviceinfo.json", devInfo("net", "0000:18:00.4"))
	conf := parseConf(t, `{"cniVersion": "1.1.0", "name": "n", "type": "t", "runtimeConfig": {"CNIDeviceInfoFile": "`+path+`"}}`)
	_, _, err := resolvePCI(conf, nil, podNetns, "net1")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"net"`) {
		t.Errorf("error %v does not name the file and the type it found", err)
	}
}

// TestDeviceInfoFileHostile: a device info file that is a FIFO, a link (to
// /dev/zero) or 100 MB of junk is refused at once, naming the file and
// what it is: resolvePCI fails with error 7's field, and the completion
// after ADD (fillDeviceInfo) leaves it alone.
func TestDeviceInfoFileHostile(t *testing.T) {
	dir := t.TempDir()
	fifo, zero, junk := filepath.Join(dir, "fifo.json"), filepath.Join(dir, "zero.json"), filepath.Join(dir, "junk.json")
	safefiletest.FIFO(t, fifo)
	safefiletest.Symlink(t, "/dev/zero", zero)
	safefiletest.Sparse(t, junk, 100<<20)
	a := &attachment{pci: "0000:18:00.2", vf: &sysfs.VF{PF: "0000:18:00.0"}, rdma: &rdma.Lookup{}}
	for path, says := range map[string]string{
		fifo: fifo + " is a FIFO, not a regular file",
		zero: zero + " is a symbolic link to /dev/zero, not a regular file",
		junk: junk + " is larger than 64 KiB",
	} {
		conf := parseConf(t, `{"cniVersion": "1.1.0", "name": "n", "type": "t", "runtimeConfig": {"CNIDeviceInfoFile": "`+path+`"}}`)
		var err, fillErr error
		safefiletest.Within(t, safefiletest.Prompt, "resolvePCI", func() { _, _, err = resolvePCI(conf, nil, podNetns, "net1") })
		safefiletest.Within(t, safefiletest.Prompt, "fillDeviceInfo", func() { _, fillErr = fillDeviceInfo(path, a) })
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != "runtimeConfig.CNIDeviceInfoFile" || !strings.Contains(err.Error(), says) {
			t.Errorf("resolvePCI with %s: %v; want a runtimeConfig.CNIDeviceInfoFile error saying %q", filepath.Base(path), err, says)
		}
		if fillErr == nil || !strings.Contains(fillErr.Error(), says) {
			t.Errorf("fillDeviceInfo of %s: %v; want an error saying %q", filepath.Base(path), fillErr, says)
		}
	}
}
