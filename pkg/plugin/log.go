package plugin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sriov-stable-cni/sriov-stable-cni/pkg/state"
)

// logger writes slog records without a caller PC. slog.Logger takes one
// with runtime.Callers on every call, and in a plugin process that lives a
// few milliseconds that stack walk, through cold pages of the binary's
// tables, costs more than formatting the line; the text handler never
// prints it anyway. Times are UTC, as in the attachment records: the node's
// local zone would be read from /etc/localtime on every plugin run.
type logger struct {
	h slog.Handler
}

func newLogger(h slog.Handler) logger { return logger{h: h} }

func (l logger) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !l.h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now().UTC(), level, msg, 0)
	r.Add(args...)
	_ = l.h.Handle(ctx, r)
}

func (l logger) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args) }
func (l logger) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args) }
func (l logger) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args) }
func (l logger) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args) }

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
