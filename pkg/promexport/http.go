package promexport

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Probes are what /healthz and /readyz ask: Health and Ready fail the
// probe with their reason; Stuck lists, after /healthz's verdict, what
// each source cannot make progress on (a read that does not return),
// without failing it: the sources go on for everything else, and
// restarting the agent would not unblock the kernel.
type Probes struct {
	Health, Ready func() error
	Stuck         []func(now time.Time) []string
}

// maxStuckLines bounds what /healthz lists: the kubelet reads 10 KiB of a
// probe's body.
const maxStuckLines = 20

// stuck is every source's Stuck lines, in order, at most maxStuckLines.
func (p Probes) stuck() []string {
	now := time.Now()
	var lines []string
	for _, s := range p.Stuck {
		lines = append(lines, s(now)...)
	}
	if len(lines) > maxStuckLines {
		more := len(lines) - (maxStuckLines - 1)
		lines = append(lines[:maxStuckLines-1], fmt.Sprintf("… and %d more", more))
	}
	return lines
}

// Handler serves /metrics from reg, /healthz (liveness) and /readyz
// (readiness). Probe failures answer 503 with the reason.
func Handler(reg *prometheus.Registry, p Probes) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", probe(p.Health, p.stuck))
	mux.HandleFunc("GET /readyz", probe(p.Ready, nil))
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

// Limits of the agent's HTTP server. Its port answers whatever reaches it
// (Prometheus and the kubelet, and anything else on the pod network), and
// the container has a memory limit.
const (
	// DefaultMaxConns bounds the connections open at once. An idle one
	// costs the server some 20 KiB (its goroutine and buffers): 8,000 would
	// take more than the container's 128 MiB, 256 take 5 MiB.
	DefaultMaxConns = 256
	// A client has this long to send its request's headers, the whole
	// request, and to take the response (a scrape of a full node is a few
	// MB); a keep-alive connection is closed after idleTimeout.
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = time.Minute
	// Nothing the server serves needs more; the default of 1 MiB per
	// connection would let headers alone take 256 MiB.
	maxHeaderBytes = 16 << 10
)

// NewServer returns an HTTP server for h with the limits above, and ln
// wrapped so that at most maxConns connections are open (connCap): serve
// the server on the listener returned.
func NewServer(ln net.Listener, h http.Handler, maxConns int) (*http.Server, net.Listener) {
	c := &connCap{Listener: ln, max: max(maxConns, 1), idle: map[*cappedConn]time.Time{}}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         c.connState,
	}
	return srv, c
}

// connCap keeps at most max connections of an HTTP server open. At the
// cap, a new connection makes room by closing the one idle longest (a
// keep-alive client between requests, or one that has sent nothing yet);
// when none is idle, the new one is closed at once. So idle clients,
// however many, never lock out the kubelet's probe or the next scrape.
// netutil.LimitListener stops accepting at its cap instead, and a probe
// would wait behind idle clients until their timeouts.
type connCap struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open int
	idle map[*cappedConn]time.Time // open connections between requests, since when
}

// cappedConn is a connection connCap counts until it is closed.
type cappedConn struct {
	net.Conn
	l    *connCap
	once sync.Once
	gone bool // closed; guarded by l.mu
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.gone = true
		delete(c.l.idle, c)
		c.l.open--
		c.l.mu.Unlock()
	})
	return err
}

// Accept returns the next connection, closing the connection idle longest
// first when max are open.
func (l *connCap) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var evict *cappedConn
		if l.open >= l.max {
			for c, since := range l.idle {
				if evict == nil || since.Before(l.idle[evict]) {
					evict = c
				}
			}
			if evict == nil {
				l.mu.Unlock()
				nc.Close() // every connection is in a request
				continue
			}
			delete(l.idle, evict)
		}
		c := &cappedConn{Conn: nc, l: l}
		l.open++
		l.mu.Unlock()
		if evict != nil {
			evict.Close()
		}
		return c, nil
	}
}

// connState is the server's ConnState hook: it tells connCap which
// connections are between requests.
func (l *connCap) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*cappedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case c.gone:
	case st == http.StateNew || st == http.StateIdle:
		l.idle[c] = time.Now()
	default:
		delete(l.idle, c)
	}
}
