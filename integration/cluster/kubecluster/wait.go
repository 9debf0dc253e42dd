package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// WaitFor polls cond every interval until it returns true or timeout
// passes, and then names what it waited for and the last error cond gave.
// An error wrapped by Fatal (a daemon that exited) ends the wait at once.
func WaitFor(timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		var fatal fatalError
		if errors.As(err, &fatal) {
			return fmt.Errorf("%s: %w", what, fatal.error)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not within %v: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-time.After(interval):
		}
	}
}

// Fatal marks a condition's error that no waiting can mend: WaitFor
// returns it at once.
func Fatal(err error) error { return fatalError{err} }

type fatalError struct{ error }

func (f fatalError) Unwrap() error { return f.error }

// HTTPGet fetches url and returns its body; a status other than 200 OK is
// an error carrying the body.
func HTTPGet(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

// ReadText returns a file's content, or the error's text in its place:
// for the logs a failure message quotes.
func ReadText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
