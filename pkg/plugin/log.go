package plugin

import (
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// newLogger is the plugin's logger: slog's text handler at the configured
// level. Times are UTC, as in the attachment records; a local time would
// make the handler read the node's zone from /etc/localtime on every
// plugin run.
func newLogger(w io.Writer, level slog.Leveler, attrs ...slog.Attr) *slog.Logger {
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: utcTime})
	return slog.New(h.WithAttrs(attrs))
}

func utcTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}

// lazyLog opens the configured log file on the first line written: a CHECK
// that finds nothing, or a DEL with nothing to do, logs nothing and need
// not open (or create) the file. A file that cannot be opened sends the
// lines to fallback (the plugin's stderr, which the runtime logs).
type lazyLog struct {
	path     string
	fallback io.Writer
	once     sync.Once
	f        *os.File
}

func (l *lazyLog) Write(p []byte) (int, error) {
	l.once.Do(func() {
		if f, err := state.OpenLog(l.path); err == nil {
			l.f = f
		}
	})
	if l.f == nil {
		return l.fallback.Write(p)
	}
	return l.f.Write(p)
}

func (l *lazyLog) close() {
	if l.f != nil {
		l.f.Close()
	}
}
