// Package promtext reads the Prometheus text format the agent serves, for
// the suites that scrape it: the agent harness (internal/testutil/agenttest),
// the monitor's namespace tests, the lab, the cluster e2e and the bench.
package promtext

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Metrics maps series (name{label="value",…}, labels sorted by name as the
// text format prints them) to values.
type Metrics map[string]float64

// Parse reads every sample line of a scrape; comments and lines without a
// number are skipped.
func Parse(text string) Metrics {
	m := Metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// Is tells whether a series is present with value v.
func (m Metrics) Is(series string, v float64) bool {
	got, ok := m[series]
	return ok && got == v
}

// Dump lists the series starting with prefix and their values, sorted, one
// per line, for failure messages.
func (m Metrics) Dump(prefix string) string {
	var out []string
	for s, v := range m {
		if strings.HasPrefix(s, prefix) {
			out = append(out, fmt.Sprintf("  %s %v", s, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Series formats name{k="v",…} with the labels sorted by name.
func Series(name string, kv ...string) string {
	var pairs []string
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	if len(pairs) == 0 {
		return name
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}
