package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/version"
)

// publishDeviceInfo fills in what the attachment's device info file
// (runtimeConfig.CNIDeviceInfoFile, Device Info spec) leaves out about the
// VF: pci.rdma-device and, from spec 1.1.0 on, pci.pf-pci-address. Multus
// copies the file into the pod's network-status annotation, so the cluster
// sees which RDMA device and PF a pod got. A value already there, a file
// about another device, a file that is not Device Info JSON or a missing
// file are left as they are: the file belongs to whoever wrote it, and
// this enrichment never costs the attachment. The rewrite is atomic.
func (p *Plugin) publishDeviceInfo(a *attachment) {
	path := p.conf.RuntimeConfig.CNIDeviceInfoFile
	if path == "" {
		return
	}
	changed, err := fillDeviceInfo(path, a)
	switch {
	case err != nil:
		p.log.Warn("device info file left as it was", "vf", a.pci, "file", path, "err", err)
	case changed:
		p.log.Debug("device info file completed", "vf", a.pci, "file", path)
	}
}

// fillDeviceInfo adds the VF's missing facts to the device info file at
// path, keeping every other key as it was. It reports whether it wrote.
func fillDeviceInfo(path string, a *attachment) (bool, error) {
	data, err := readBounded(path, maxDeviceInfoSize)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return false, fmt.Errorf("not JSON: %w", err)
	}
	var head struct {
		Type    string `json:"type"`
		Version string `json:"version"`
	}
	var pci map[string]json.RawMessage
	if err := json.Unmarshal(data, &head); err != nil || head.Type != "pci" {
		return false, fmt.Errorf("not a pci device info file (type %q)", head.Type)
	}
	if err := json.Unmarshal(doc["pci"], &pci); err != nil || pci == nil {
		return false, fmt.Errorf("no pci object")
	}
	var addr string
	if err := json.Unmarshal(pci["pci-address"], &addr); err != nil || addr != a.pci {
		return false, fmt.Errorf("it describes PCI device %q, not VF %s", addr, a.pci)
	}
	set := func(key, value string) bool {
		var cur string
		if value == "" || json.Unmarshal(pci[key], &cur) == nil && cur != "" {
			return false
		}
		pci[key], _ = json.Marshal(value)
		return true
	}
	changed := false
	if len(a.rdma.Devices) > 0 {
		changed = set("rdma-device", a.rdma.Devices[0].Name) || changed
	}
	if ok, err := version.GreaterThanOrEqualTo(head.Version, "1.1.0"); err == nil && ok {
		changed = set("pf-pci-address", a.vf.PF) || changed
	}
	if !changed {
		return false, nil
	}
	if doc["pci"], err = json.Marshal(pci); err != nil {
		return false, err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return false, err
	}
	return true, replaceFile(path, out)
}

// replaceFile writes data over path atomically (a temp file in the same
// directory, renamed over it), keeping path's permission bits.
func replaceFile(path string, data []byte) (err error) {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(info.Mode().Perm()); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
