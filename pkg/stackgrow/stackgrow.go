// Package stackgrow grows the calling goroutine's stack once, while it is
// still shallow. A goroutine starts with a few KiB of stack and doubles it
// each time a call runs out: the runtime then copies the whole stack and
// walks every frame on it to adjust pointers. In a CNI plugin whose process
// lives a few milliseconds, JSON decoding, reflection and netlink parsing
// cross four or five of those doublings at depth; growing once at the start
// replaces them with one copy of a nearly empty stack (see README
// "Performance").
package stackgrow

// Size is the stack Grow leaves the goroutine with, at least: enough for
// the deepest call chain of ADD, CHECK and DEL.
const Size = 64 << 10

// Grow makes the calling goroutine's stack at least Size bytes. The frame
// is declared and never touched, so the new stack's pages are not faulted
// in until a call really reaches them. Where no assembly is provided it does
// nothing.
func Grow() { grow() }
