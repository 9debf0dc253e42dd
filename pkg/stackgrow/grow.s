//go:build amd64 || arm64

#include "textflag.h"

// func grow()
// A frame of 56 KiB that is never touched. The prologue's stack check calls
// morestack, which doubles the stack until the frame fits: from the few KiB
// a goroutine starts with, that is 64 KiB (Size). The same text assembles
// for amd64 and arm64.
TEXT ·grow(SB), 0, $57344-0
	RET
