package doctor

import (
	"fmt"
	"strings"
)

// NPDSummary is the report in one line of at most max bytes, for
// node-problem-detector's custom plugin monitor, which keeps that much of
// a plugin's output as the condition's message: the error count and as
// many distinct "check subject" pairs as fit, or that the node is healthy.
func (r *Report) NPDSummary(max int) string {
	errs := r.Count(SeverityError)
	if errs == 0 {
		s := fmt.Sprintf("SR-IOV VFs healthy (%d PFs, %d VFs", r.PFs, r.VFs)
		if w := r.Count(SeverityWarning); w > 0 {
			s += fmt.Sprintf(", %d warnings", w)
		}
		return cut(s+")", max)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d SR-IOV error", errs)
	if errs > 1 {
		b.WriteString("s")
	}
	sep := ": "
	named := map[string]bool{} // a VF's zero node and port GUID name it once
	for _, f := range r.Findings {
		pair := f.Check + " " + f.Subject
		if f.Severity != SeverityError || named[pair] {
			continue
		}
		named[pair] = true
		b.WriteString(sep + pair)
		sep = "; "
	}
	return cut(b.String(), max)
}

// cut shortens s to at most max bytes, ending in "…" when it had to.
func cut(s string, max int) string {
	const ellipsis = "…"
	if len(s) <= max {
		return s
	}
	if max < len(ellipsis) {
		return s[:max]
	}
	s = s[:max-len(ellipsis)]
	for len(s) > 0 && s[len(s)-1]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xc0 {
		s = s[:len(s)-1]
	}
	return s + ellipsis
}
