package monitor

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics from reg, /healthz (liveness: the sweep loop is
// alive) and /readyz (readiness: a sweep completed and the state directory
// can be listed). Probe failures answer 503 with the reason. /healthz also
// lists, after its verdict, the VFs the monitor cannot check (Stuck),
// without failing for them.
func (m *Monitor) Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", probe(m.Health, m.Stuck))
	mux.HandleFunc("GET /readyz", probe(m.Ready, nil))
	return mux
}

func probe(check func() error, notes func() []string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
		} else {
			fmt.Fprintln(w, "ok")
		}
		if notes != nil {
			for _, n := range notes() {
				fmt.Fprintln(w, n)
			}
		}
	}
}
