package kubecluster

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	t.Run("until the condition holds", func(t *testing.T) {
		calls := 0
		err := WaitFor(time.Minute, time.Millisecond, "three calls", func() (bool, error) {
			calls++
			return calls == 3, errors.New("not yet")
		})
		if err != nil || calls != 3 {
			t.Errorf("err %v after %d calls, want nil after 3", err, calls)
		}
	})
	t.Run("a fatal error ends the wait at once", func(t *testing.T) {
		exited := errors.New("etcd exited")
		calls := 0
		err := WaitFor(time.Hour, time.Hour, "etcd healthy", func() (bool, error) {
			calls++
			return false, Fatal(exited)
		})
		if !errors.Is(err, exited) || calls != 1 || err.Error() != "etcd healthy: etcd exited" {
			t.Errorf("err %q after %d calls, want %q after 1", err, calls, "etcd healthy: etcd exited")
		}
	})
	t.Run("a timeout names the last error", func(t *testing.T) {
		err := WaitFor(20*time.Millisecond, time.Millisecond, "every pod gone", func() (bool, error) {
			return false, errors.New("2 pods left")
		})
		if err == nil || !strings.HasPrefix(err.Error(), "every pod gone: not within 20ms: 2 pods left") {
			t.Errorf("err %v, want every pod gone: not within 20ms: 2 pods left", err)
		}
	})
}
