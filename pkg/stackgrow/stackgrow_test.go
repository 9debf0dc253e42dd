//go:build amd64 || arm64

package stackgrow

import (
	"testing"
	"unsafe"
)

// deep recurses n times through a frame of about 1 KiB, so a goroutine
// needs some n KiB of stack to finish it.
//
//go:noinline
func deep(n int) byte {
	var pad [1000]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%len(pad)]
}

// moved reports whether the calling goroutine's stack was copied while it
// ran 48 KiB deep: a local's address changes when the runtime moves the
// stack to grow it.
func moved(grow bool) bool {
	ch := make(chan bool)
	go func() {
		if grow {
			Grow()
		}
		var marker byte
		before := uintptr(unsafe.Pointer(&marker))
		deep(48)
		ch <- uintptr(unsafe.Pointer(&marker)) != before
	}()
	return <-ch
}

func TestGrowLeavesRoomForDeepCalls(t *testing.T) {
	if !moved(false) {
		t.Fatal("a fresh goroutine ran 48 KiB deep without its stack being moved; the test cannot tell Grow works")
	}
	if moved(true) {
		t.Fatalf("after Grow, a call chain of 48 KiB still moved the stack; Grow should leave at least %d KiB", Size>>10)
	}
}
