//go:build clustere2e

package cluster

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// A figure is one number the run prints at its end, by scenario.
type figure struct {
	scenario, what, value string
}

var (
	figuresMu sync.Mutex
	figures   []figure
)

// figf records a figure and prints it at once too, so a run stopped early
// still shows what it measured.
func figf(scenario, what, format string, a ...any) {
	f := figure{scenario, what, fmt.Sprintf(format, a...)}
	figuresMu.Lock()
	figures = append(figures, f)
	figuresMu.Unlock()
	fmt.Printf("figure: %s: %s: %s\n", f.scenario, f.what, f.value)
}

func printFigures() {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	fmt.Println("\ncluster e2e figures")
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	for _, f := range figures {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", f.scenario, f.what, f.value)
	}
	w.Flush()
}

// quantiles returns the median and the 90th percentile of ds.
func quantiles(ds []time.Duration) (p50, p90 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1)+0.5)] }
	return at(0.5), at(0.9)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
