package doctor

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints one line per finding — severity, check, subject,
// message and remedy — then a summary line.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range r.Findings {
		line := fmt.Sprintf("%s\t%s\t%s\t%s", f.Severity, f.Check, f.Subject, f.Message)
		if f.Remedy != "" {
			line += "; remedy: " + f.Remedy
		}
		if _, err := fmt.Fprintln(tw, line); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	inPods := ""
	if r.RDMAInPods > 0 {
		inPods = fmt.Sprintf(", %d VFs with their RDMA device in a pod's netns", r.RDMAInPods)
	}
	_, err := fmt.Fprintf(w, "%d Mellanox PFs, %d VFs under %s%s: %d errors, %d warnings, %d info\n",
		r.PFs, r.VFs, r.SysfsRoot, inPods, r.Count(SeverityError), r.Count(SeverityWarning), r.Count(SeverityInfo))
	return err
}
