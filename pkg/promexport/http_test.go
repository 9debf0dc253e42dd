package promexport

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveCapped serves h on loopback through NewServer with a cap of max
// connections, until the test ends.
func serveCapped(t *testing.T, h http.Handler, max int) (addr string, c *connCap) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, capped := NewServer(ln, h, max)
	go func() { _ = srv.Serve(capped) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), capped.(*connCap)
}

// keepAlive connects, makes one request and keeps the connection, as a
// keep-alive client between requests does; nothing: it sends nothing.
func keepAlive(t *testing.T, addr, path string, nothing bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if nothing {
		return c
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return c
}

func (l *connCap) counts() (open, idle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.idle)
}

// At the cap, a new connection closes the one idle longest, so idle
// clients, however many, never keep a request out; when every connection
// is in a request, a new one is closed at once instead of queued.
func TestConnCap(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	entered := make(chan struct{}, 8)
	mux.HandleFunc("/block", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	})
	addr, l := serveCapped(t, mux, 8)

	var idle []net.Conn
	for i := range 50 {
		idle = append(idle, keepAlive(t, addr, "/ok", i%2 == 0))
	}
	if open, _ := l.counts(); open > 8 {
		t.Errorf("%d connections open with a cap of 8", open)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/ok")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET beside 50 idle clients: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, c := range idle {
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if open, _ := l.counts(); open == 0 {
			break
		}
		if time.Now().After(deadline) {
			open, idle := l.counts()
			t.Fatalf("%d connections open (%d idle) after every client closed", open, idle)
		}
	}

	// Every connection in a request: the next one is refused, not queued.
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	for i := range 8 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			open, idle := l.counts()
			t.Fatalf("%d of 8 requests under way after 5s: %d open, %d idle", i, open, idle)
		}
	}
	if open, idle := l.counts(); open != 8 || idle != 0 {
		t.Fatalf("8 requests under way: %d connections open, %d idle; want 8, 0", open, idle)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 2*time.Second {
		open, idle := l.counts()
		t.Errorf("a connection beyond the cap, every other in a request: read %v after %s, want closed at once (%d open, %d idle)", err, time.Since(start), open, idle)
	}
	close(release)
}
