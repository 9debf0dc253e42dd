package plugin

import (
	"encoding/json"
	"fmt"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/config"
)

// maxDeviceInfoSize bounds the device info file we read.
const maxDeviceInfoSize = 64 << 10

// deviceInfo is the part of a Device Info spec 1.1.0 file we use.
type deviceInfo struct {
	Type string `json:"type"`
	PCI  struct {
		Address string `json:"pci-address"`
	} `json:"pci"`
}

// resolvePCI returns the VF's PCI address and the field it came from:
// deviceID, pciBusID, runtimeConfig.deviceID (already checked by config),
// then the device info file, then the prevResult interface's pciID.
func resolvePCI(conf *config.NetConf, prev *current.Result, netns, ifName string) (string, string, error) {
	if conf.PCIAddress != "" {
		return conf.PCIAddress, conf.PCISource, nil
	}
	if path := conf.RuntimeConfig.CNIDeviceInfoFile; path != "" {
		addr, err := readDeviceInfo(path)
		if err != nil {
			return "", "", err
		}
		return addr, "runtimeConfig.CNIDeviceInfoFile", nil
	}
	if prev != nil {
		if i := ourInterface(prev, netns, ifName, "", ""); i >= 0 && prev.Interfaces[i].PciID != "" {
			addr, err := config.NormalizePCI("prevResult pciID", prev.Interfaces[i].PciID)
			return addr, "prevResult pciID", err
		}
	}
	return "", "", &config.Error{Field: "deviceID", Reason: "no PCI address: set deviceID or pciBusID (Multus injects both), " +
		"runtimeConfig.deviceID or runtimeConfig.CNIDeviceInfoFile, or chain after a plugin that returns pciID"}
}

func readDeviceInfo(path string) (string, error) {
	field := "runtimeConfig.CNIDeviceInfoFile"
	data, err := readBounded(path, maxDeviceInfoSize)
	if err != nil {
		return "", &config.Error{Field: field, Reason: err.Error()}
	}
	var di deviceInfo
	if err := json.Unmarshal(data, &di); err != nil {
		return "", &config.Error{Field: field, Reason: fmt.Sprintf("%s is not a device info file: %v", path, err)}
	}
	if di.Type != "pci" {
		return "", &config.Error{Field: field, Reason: fmt.Sprintf("%s describes a %q device, want \"pci\"", path, di.Type)}
	}
	return config.NormalizePCI(field+" pci.pci-address", di.PCI.Address)
}

// readBounded reads a device info file: a regular file of at most limit
// bytes, not a link, opened without waiting on a FIFO (package safefile).
// Multus writes it in its own directory; anything else there is refused
// with what was found.
func readBounded(path string, limit int64) ([]byte, error) {
	data, err := safefile.ReadFile(path, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot read the device info file: %w", err)
	}
	return data, nil
}
