package gateway

// Reads and writes on a plain socket made with RawSyscall.
//
// Why: a goroutine's ordinary system call (syscall.Read, the net package's
// Read and Write) tells the scheduler it may block, and the first such
// call after the process went idle wakes the runtime's monitor thread
// (sysmon), which then polls every 20 µs until the process is idle again.
// At the rates sensors send every reading wakes the process from idle: at
// 500 readings/s from 1,000 connections that monitor was half of the
// process's 1,500 thread wakeups a second (issue 16). A socket from the
// net package is non-blocking, so its read and write return at once
// (EAGAIN when there is nothing to read or no room): the scheduler need
// not know. Waiting for input stays with the poller (RawConn.Read calls
// the op again once the socket is readable, and keeps the deadline).
//
// The race detector does not see the kernel's side of these calls; the
// syscall package annotates its own, and sockio_race.go does the same
// here: a read writes the bytes it took, a write reads its buffer.

import (
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// sockOp is one read or write through a socket's RawConn. It is pooled,
// with its RawConn callbacks bound once, so a call allocates nothing and
// an idle connection holds none.
type sockOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	wait  bool // a read that waits for input instead of reporting EAGAIN

	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr)
}

var sockOpPool = sync.Pool{New: func() any { return newSockOp() }}

func newSockOp() *sockOp {
	o := new(sockOp)
	o.readFn, o.writeFn = o.read, o.write
	return o
}

func (o *sockOp) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)))
		if e == syscall.EINTR {
			continue
		}
		o.n, o.errno = int(r), e
		return e != syscall.EAGAIN || !o.wait // false: the poller waits, then calls again
	}
}

func (o *sockOp) write(fd uintptr) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)))
		if e != syscall.EINTR {
			o.n, o.errno = int(r), e
			return
		}
	}
}

// rawRead reads into p (len(p) > 0) from raw. With wait it waits for
// input like conn.Read (deadline and close included: those errors are the
// poller's, net.ErrClosed and os.ErrDeadlineExceeded); without, it returns
// errWouldBlock when nothing is there.
func rawRead(raw syscall.RawConn, p []byte, wait bool) (int, error) {
	o := sockOpPool.Get().(*sockOp)
	n, err := o.readVia(raw, p, wait)
	sockOpPool.Put(o)
	return n, err
}

func (o *sockOp) readVia(raw syscall.RawConn, p []byte, wait bool) (int, error) {
	o.p, o.wait = p, wait
	err := raw.Read(o.readFn)
	n, errno := o.n, o.errno
	o.p = nil
	if err == nil && errno == 0 {
		raceRead(p, n)
	}
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, errWouldBlock
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// rawWrite makes one non-blocking write of p (len(p) > 0) to raw and
// returns how much the kernel took: 0 when its buffer is full.
func rawWrite(raw syscall.RawConn, p []byte) (int, error) {
	o := sockOpPool.Get().(*sockOp)
	n, err := o.writeVia(raw, p)
	sockOpPool.Put(o)
	return n, err
}

func (o *sockOp) writeVia(raw syscall.RawConn, p []byte) (int, error) {
	raceWrite(p)
	o.p = p
	err := raw.Control(o.writeFn)
	n, errno := o.n, o.errno
	o.p = nil
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, os.NewSyscallError("write", errno)
	}
	return n, nil
}
