//go:build race

package sockio

// The race detector's view of sockio's system calls, as the syscall
// package gives it for its own: a read writes the bytes it took into p, a
// write reads p. Without it a goroutine touching a buffer the kernel
// fills was a race no -race test could see.

import (
	"runtime"
	"unsafe"
)

func raceRead(p []byte, n int) {
	if n > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&p[0]), n)
	}
}

func raceWrite(p []byte) {
	if len(p) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p))
	}
}
