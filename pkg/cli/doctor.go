package cli

import (
	"fmt"
	"io"
)

// runDoctor is owned by the doctor work; until it lands the command says so.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sriov-stable-cni doctor: not built yet")
	return 2
}
