package cli

import (
	"io"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/install"
	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/plugin"
)

// runInstall copies this binary into a CNI bin dir (the installer
// DaemonSet's job); the installed copy must report the CNI versions this
// build supports.
func runInstall(args []string, stdout, stderr io.Writer) int {
	return install.Run(args, stdout, stderr, plugin.Versions.SupportedVersions())
}
