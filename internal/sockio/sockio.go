// Package sockio reads and writes a plain socket (one from the net
// package) with RawSyscall through its syscall.RawConn.
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
// not know. Waiting stays with the poller (RawConn.Read and Write call the
// op again once the socket is ready, and keep the deadline), so a close
// or a deadline ends a call with the net package's errors
// (errors.Is net.ErrClosed, os.ErrDeadlineExceeded; Op "raw-read" or
// "raw-write"); an error from the kernel (a reset, a broken pipe) is an
// *os.SyscallError without the addresses conn.Read would add.
//
// The race detector does not see the kernel's side of these calls; the
// syscall package annotates its own, and race.go does the same here: a
// read writes the bytes it took, a write reads its buffer.
package sockio

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// ErrWouldBlock is what a read that may not wait returns when no input is
// there.
var ErrWouldBlock = errors.New("read would block")

// op is one read or write through a socket's RawConn. It is pooled, with
// its RawConn callbacks bound once, so a call allocates nothing and an
// idle connection holds none.
type op struct {
	p     []byte
	n     int
	errno syscall.Errno
	wait  bool // a read that waits for input instead of reporting EAGAIN

	readFn     func(fd uintptr) bool
	tryWriteFn func(fd uintptr)
	writeFn    func(fd uintptr) bool
}

var opPool = sync.Pool{New: func() any { return newOp() }}

func newOp() *op {
	o := new(op)
	o.readFn, o.tryWriteFn, o.writeFn = o.read, o.tryWrite, o.write
	return o
}

func (o *op) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)))
		if e == syscall.EINTR {
			continue
		}
		o.n, o.errno = int(r), e
		return e != syscall.EAGAIN || !o.wait // false: the poller waits, then calls again
	}
}

func (o *op) tryWrite(fd uintptr) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)))
		if e != syscall.EINTR {
			o.n, o.errno = int(r), e
			return
		}
	}
}

// write writes what is left of p (o.n bytes are done); false: the socket
// is full, the poller waits, then calls again.
func (o *op) write(fd uintptr) bool {
	for o.n < len(o.p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.p[o.n])), uintptr(len(o.p)-o.n))
		switch e {
		case 0:
			o.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// Read reads into p (len(p) > 0) from raw. With wait it waits for input
// like conn.Read (deadline and close included); without, it returns
// ErrWouldBlock when nothing is there.
func Read(raw syscall.RawConn, p []byte, wait bool) (int, error) {
	o := opPool.Get().(*op)
	n, err := o.readVia(raw, p, wait)
	opPool.Put(o)
	return n, err
}

func (o *op) readVia(raw syscall.RawConn, p []byte, wait bool) (int, error) {
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
		return 0, ErrWouldBlock
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// TryWrite makes one non-blocking write of p (len(p) > 0) to raw and
// returns how much the kernel took: 0 when its buffer is full.
func TryWrite(raw syscall.RawConn, p []byte) (int, error) {
	o := opPool.Get().(*op)
	n, err := o.tryWriteVia(raw, p)
	opPool.Put(o)
	return n, err
}

func (o *op) tryWriteVia(raw syscall.RawConn, p []byte) (int, error) {
	raceWrite(p)
	o.p = p
	err := raw.Control(o.tryWriteFn)
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

// Write writes all of p to raw like conn.Write: it waits while the
// socket is full, until the write deadline. It returns how much was
// written, all of p unless err is set.
func Write(raw syscall.RawConn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o := opPool.Get().(*op)
	n, err := o.writeVia(raw, p)
	opPool.Put(o)
	return n, err
}

func (o *op) writeVia(raw syscall.RawConn, p []byte) (int, error) {
	raceWrite(p)
	o.p, o.n, o.errno = p, 0, 0
	err := raw.Write(o.writeFn)
	n, errno := o.n, o.errno
	o.p = nil
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, os.NewSyscallError("write", errno)
	}
	return n, nil
}
