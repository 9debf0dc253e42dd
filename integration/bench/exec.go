package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// execSample is one plugin process as libcni ran it.
type execSample struct {
	Plugin string // the plugin's type (binary name)
	Verb   string // CNI_COMMAND
	Wall   time.Duration
	CPU    time.Duration // user + system
	MaxRSS int64         // peak resident set in KiB, only from a traced run
}

// callLog collects the plugin processes of one libcni call. One call runs
// its plugins one after another, so a log is written by one goroutine.
type callLog struct {
	execs []execSample
	// traceRSS names the plugin whose peak RSS this call measures under
	// ptrace ("" for none): a timed run must not be traced.
	traceRSS string
}

type callLogKey struct{}

func withCallLog(ctx context.Context, l *callLog) context.Context {
	return context.WithValue(ctx, callLogKey{}, l)
}

// timedExec is libcni's plugin executor (invoke.RawExec's behaviour: same
// environment, stdin, error decoding) that also records each plugin
// process's wall time and CPU time, and on request its peak RSS.
type timedExec struct {
	version.PluginDecoder
}

var _ invoke.Exec = (*timedExec)(nil)

func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdinData)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	l, _ := ctx.Value(callLogKey{}).(*callLog)
	plugin := filepath.Base(pluginPath)
	var hwm int64
	start := time.Now()
	var err error
	if l != nil && l.traceRSS == plugin {
		hwm, err = runTraced(cmd)
	} else {
		err = cmd.Run()
	}
	wall := time.Since(start)
	if l != nil && cmd.ProcessState != nil {
		l.execs = append(l.execs, execSample{Plugin: plugin, Verb: envValue(environ, "CNI_COMMAND"), Wall: wall,
			CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), MaxRSS: hwm})
	}
	if err != nil {
		return nil, pluginErr(err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func (e *timedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// pluginErr decodes a failed plugin's error as invoke.RawExec does.
func pluginErr(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", stderr, err)
	default:
		if perr := json.Unmarshal(stdout, &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", stdout, perr)
		}
	}
	return &emsg
}

func envValue(environ []string, key string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
