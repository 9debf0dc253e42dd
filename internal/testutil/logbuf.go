package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is a log sink that the goroutines of the code under test
// write while the test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count counts the occurrences of substr.
func (l *LogBuffer) Count(substr string) int { return strings.Count(l.String(), substr) }

// Lines counts the lines holding every one of parts.
func (l *LogBuffer) Lines(parts ...string) int { return CountLines(l.String(), parts...) }

// CountLines counts the lines of text holding every one of parts.
func CountLines(text string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}
