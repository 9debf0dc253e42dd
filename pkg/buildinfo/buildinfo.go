// Package buildinfo holds the version and commit stamped into the binaries
// at link time (-X), shown by `sriov-stable-cni version` and in CNI's about
// string.
package buildinfo

// Set with -ldflags "-X github.com/sriov-stable-cni/sriov-stable-cni/pkg/buildinfo.Version=…".
var (
	Version = "dev"
	Commit  = "unknown"
)

// About is the one-line description printed by skel when no CNI_COMMAND is set.
func About(name string) string {
	return "CNI plugin " + name + " " + Version + " (commit " + Commit + ")"
}
