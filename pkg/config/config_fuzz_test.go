package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzBase is a configuration Parse accepts, the seed most mutations start from.
const fuzzBase = `{"cniVersion":"1.1.0","name":"ib-net","type":"sriov-stable-cni","deviceID":"0000:18:00.2",` +
	`"pciBusID":"0000:18:00.2","altName":"vf-{pf}-{vf}","linkLayer":"infiniband","guidPolicy":"warn",` +
	`"portPolicy":"require","portWaitMs":300,"mtu":4092,"stateDir":"/var/lib/cni/sriov-stable",` +
	`"sysfsRoot":"/sys","logFile":"/var/log/sriov-stable.log","logLevel":"debug",` +
	`"runtimeConfig":{"deviceID":"0000:18:00.3","CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/x.json"},` +
	`"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"net1","pciID":"0000:18:00.2"}]}}`

// FuzzParse feeds arbitrary stdin to Parse and ParseLenient. Neither may
// panic; every Parse error is a *Error naming a field; whatever Parse
// accepts is usable as it stands (its altName renders for any real VF);
// and whatever ParseLenient returns leaves DEL usable paths.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		fuzzBase,
		`{"cniVersion":"1.1.0","name":"n","type":"sriov-stable-cni"}`,
		`{"name":"n","deviceID":"../../etc","stateDir":"rel","sysfsRoot":"/","altName":"{pci}{pci}{pci}"}`,
		`{"name":"a..b","portWaitMs":"300","mtu":-1,"logLevel":"trace","altName":"vf-{bus"}`,
		`{"name":"n","runtimeConfig":"x","prevResult":"y","dns":7}`,
		`{"name":"n","pciBusID":"0000:18:00.9","guidPolicy":"maybe","linkLayer":"ib"}`,
		`{"name":"n","stateDir":"/","logFile":"x\u0000y"}`,
		`null`, `[]`, `{}`, `{"name":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := Parse(stdin, DefaultRoots())
		lenient, lerr := ParseLenient(stdin, DefaultRoots())
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.Field == "" {
				t.Fatalf("Parse error %v is not a config.Error naming a field", err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("Parse error is %d bytes long", len(err.Error()))
			}
		} else {
			fuzzCheckAccepted(t, conf)
			if lerr != nil {
				t.Fatalf("ParseLenient rejects what Parse accepts: %v", lerr)
			}
			if lenient.StateDir != conf.StateDir || lenient.SysfsRoot != conf.SysfsRoot || lenient.LogFile != conf.LogFile ||
				lenient.PCIAddress != conf.PCIAddress || lenient.PathError != nil {
				t.Fatalf("ParseLenient disagrees with Parse on a valid config: %+v vs %+v", lenient, conf)
			}
		}
		if lerr == nil {
			for _, p := range []string{lenient.StateDir, lenient.SysfsRoot} {
				if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
					t.Fatalf("ParseLenient leaves DEL an unusable path %q", p)
				}
			}
			if lenient.StateDir == "/" || lenient.LogFile != "" && (!strings.HasPrefix(lenient.LogFile, "/") || strings.ContainsRune(lenient.LogFile, 0)) {
				t.Fatalf("ParseLenient leaves DEL stateDir %q, logFile %q", lenient.StateDir, lenient.LogFile)
			}
			if a := lenient.PCIAddress; a != "" {
				if n, err := NormalizePCI("x", a); err != nil || n != a {
					t.Fatalf("ParseLenient PCI address %q is not normalized", a)
				}
			}
		}
	})
}

func fuzzCheckAccepted(t *testing.T, c *NetConf) {
	t.Helper()
	if err := ValidateKeyPart("name", c.Name); err != nil {
		t.Fatalf("accepted name: %v", err)
	}
	if !strings.HasPrefix(c.StateDir, "/") || c.StateDir == "/" || !strings.HasPrefix(c.SysfsRoot, "/") {
		t.Fatalf("accepted stateDir %q, sysfsRoot %q", c.StateDir, c.SysfsRoot)
	}
	// Fuzzed with the default roots: every accepted path is clean and
	// under them.
	under := func(p string, roots ...string) bool {
		return filepath.Clean(p) == p && slices.ContainsFunc(roots, func(r string) bool { return strings.HasPrefix(p, r+"/") })
	}
	if !under(c.StateDir, "/run", "/var/lib/cni") || c.SysfsRoot != "/sys" && !under(c.SysfsRoot, "/sys") ||
		c.LogFile != "" && !under(c.LogFile, "/var/log") {
		t.Fatalf("accepted stateDir %q, sysfsRoot %q, logFile %q: not clean or outside the default roots", c.StateDir, c.SysfsRoot, c.LogFile)
	}
	if c.PCIAddress != "" {
		if n, err := NormalizePCI("x", c.PCIAddress); err != nil || n != c.PCIAddress || c.PCISource == "" {
			t.Fatalf("accepted PCI address %q (from %q) is not normalized", c.PCIAddress, c.PCISource)
		}
	}
	switch c.LinkLayer {
	case LinkLayerAuto, LinkLayerInfiniBand, LinkLayerEthernet:
	default:
		t.Fatalf("accepted linkLayer %q", c.LinkLayer)
	}
	for _, p := range []Policy{c.GUIDPolicy, c.PortPolicy} {
		if p != PolicyRequire && p != PolicyWarn && p != PolicyIgnore {
			t.Fatalf("accepted policy %q", p)
		}
	}
	if w := c.PortWait().Milliseconds(); w < 0 || w > MaxPortWaitMs {
		t.Fatalf("accepted port wait %dms", w)
	}
	for _, vf := range []struct {
		pci, pf string
		idx     int
	}{{"0000:18:00.2", "0000:18:00.0", 0}, {"ffff:ff:1f.7", "ffff:ff:1f.0", 65535}} {
		name, err := RenderAltName(c.AltName, vf.pci, vf.pf, vf.idx)
		if err != nil {
			t.Fatalf("accepted altName %q does not render for %s: %v", c.AltName, vf.pci, err)
		}
		if err := ValidateAltName(name); err != nil {
			t.Fatalf("accepted altName %q renders invalid %q: %v", c.AltName, name, err)
		}
	}
}

// FuzzRenderAltName: a rendered name is always a valid altname, and a
// template that passes ValidateAltNameTemplate renders for every real VF.
func FuzzRenderAltName(f *testing.F) {
	f.Add("vf-{pci}", "0000:18:00.2", "0000:18:00.0", 3)
	f.Add("{pf}.{vf}", "0000:af:1f.7", "0000:af:00.0", 65535)
	f.Add("{pci}{pci}{pci}{pci}{pci}{pci}{pci}{pci}{pci}{pci}", "0000:18:00.2", "", -1)
	f.Add("ib{vf", "0000:18:00.2", "0000:18:00.0", 0)
	f.Add("{}", "x", "y", 1)
	f.Add("vf-é{pci}", "0000:18:00.2", "0000:18:00.0", 7)
	f.Fuzz(func(t *testing.T, tmpl, pci, pf string, idx int) {
		name, err := RenderAltName(tmpl, pci, pf, idx)
		if err == nil {
			if verr := ValidateAltName(name); verr != nil || len(name) > MaxAltNameLen {
				t.Fatalf("RenderAltName(%q) = %q, an invalid altname: %v", tmpl, name, verr)
			}
		} else if len(err.Error()) > 1024 {
			t.Fatalf("error is %d bytes long", len(err.Error()))
		}
		if ValidateAltNameTemplate(tmpl) != nil {
			return
		}
		vf, verr := NormalizePCI("vf", pci)
		phys, perr := NormalizePCI("pf", pf)
		if verr != nil || perr != nil || idx < 0 || idx > 65535 {
			return
		}
		if _, err := RenderAltName(tmpl, vf, phys, idx); err != nil {
			t.Fatalf("template %q passed validation but does not render for VF %s (PF %s, index %d): %v", tmpl, vf, phys, idx, err)
		}
	})
}
