package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// AllowedRootsEnv names the environment variable through which a node's
// administrator lets network configurations use more directories: absolute
// paths separated by colons, each added to the allowed roots of stateDir,
// sysfsRoot, logFile and runtimeConfig.CNIDeviceInfoFile. The plugin reads it from the environment the
// container runtime gives it.
const AllowedRootsEnv = "SRIOV_STABLE_CNI_ALLOWED_ROOTS"

// Roots are the directories under which a network configuration may put
// the plugin's paths. A NetworkAttachmentDefinition may be written by any
// user of its namespace, and the plugin runs as root on the node: without
// this bound, logFile could append to /etc/cron.d/x and stateDir create
// files anywhere. The check is lexical (filepath.Clean, no symlink is
// read); what lies under a root is the node's, and the plugin opens its
// lock, record and log files without following a final symlink.
type Roots struct {
	StateDir  []string
	SysfsRoot []string
	LogFile   []string
	// DeviceInfo bounds runtimeConfig.CNIDeviceInfoFile, which the plugin
	// reads and, when it describes this VF, completes in place.
	DeviceInfo []string
	// Ignored holds the entries of AllowedRootsEnv that were not absolute
	// paths, so an error can say why a root the administrator meant to add
	// does not count.
	Ignored []string
}

// DefaultRoots are the roots when AllowedRootsEnv adds none: the state
// directories the plugin has used by default (/run/cni/sriov-stable, the
// legacy /var/lib/cni/sriov-stable), the node's sysfs and its logs.
func DefaultRoots() Roots {
	return Roots{
		StateDir:  []string{"/var/lib/cni", "/run"},
		SysfsRoot: []string{"/sys"},
		LogFile:   []string{"/var/log"},
		// Where Multus writes the Device Info files (its default
		// /var/run/k8s.cni.cncf.io/devinfo; /var/run is /run).
		DeviceInfo: []string{"/var/run/k8s.cni.cncf.io/devinfo", "/run/k8s.cni.cncf.io/devinfo"},
	}
}

// RootsFrom returns DefaultRoots widened by env, the value of
// AllowedRootsEnv (read by the caller: parsing stays free of I/O). Each
// entry is cleaned; empty entries are skipped and relative ones ignored
// (and listed in Ignored), so a typo there narrows nothing the defaults
// allow.
func RootsFrom(env string) Roots {
	r := DefaultRoots()
	for _, e := range strings.Split(env, ":") {
		switch {
		case e == "":
		case !strings.HasPrefix(e, "/"):
			r.Ignored = append(r.Ignored, e)
		default:
			root := filepath.Clean(e)
			r.StateDir = append(r.StateDir, root)
			r.SysfsRoot = append(r.SysfsRoot, root)
			r.LogFile = append(r.LogFile, root)
			r.DeviceInfo = append(r.DeviceInfo, root)
		}
	}
	return r
}

// checkUnderRoots returns an error naming field unless the clean absolute
// path p lies under one of roots. With atRoot a root itself counts;
// stateDir and logFile may not be one: a root is a directory other software
// shares.
func checkUnderRoots(field, val, p string, roots []string, atRoot bool, ignored []string) error {
	for _, root := range roots {
		if strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/") && p != "/" || atRoot && p == root {
			return nil
		}
	}
	for _, root := range roots {
		if p == root {
			return fieldErr(field, "%q is the allowed root %s itself; name a path of the plugin's own under it", truncate(val, 128), root)
		}
	}
	shown := fmt.Sprintf("%q", truncate(val, 128))
	if p != val {
		shown += fmt.Sprintf(" (%s)", truncate(p, 128))
	}
	reason := fmt.Sprintf("%s is outside the allowed roots %s; a node administrator allows another directory with %s "+
		"in the environment the runtime runs the plugin with", shown, strings.Join(roots, ", "), AllowedRootsEnv)
	if len(ignored) > 0 {
		reason += fmt.Sprintf(" (ignored there, not absolute: %q)", truncate(strings.Join(ignored, ":"), 128))
	}
	return &Error{Field: field, Reason: reason}
}
