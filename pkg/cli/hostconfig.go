package cli

import (
	"fmt"
	"io"
)

// runHostconfig is owned by the hostconfig work; until it lands the command says so.
func runHostconfig(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sriov-stable-cni hostconfig: not built yet")
	return 2
}
