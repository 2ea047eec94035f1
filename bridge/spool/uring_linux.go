//go:build linux

package spool

// The commit's small writes (a window's records, acks.log's ranges) go
// through io_uring where the kernel offers it (Linux 5.12 on). An ordinary
// write is a system call the Go runtime hands off: at a sensor fleet's
// rates that wakes sysmon at every commit, which was most of the spool's
// wakeups at low rates (issue 16). A raw io_uring_enter is not handed off,
// and never waits for the disk: a buffered write that can complete at once
// does so during the submission (its completion is then already in the
// ring), one that would block is handed to the kernel's workers, and its
// completion is waited for on an eventfd through the Go poller. So neither
// the ordinary system call that wakes sysmon nor a raw one that could hold
// the only processor for a slow SD card's journal.
//
// The eventfd is registered for every completion: an ASYNC registration
// signals only io-wq's, and a write finished through task work never woke
// the waiter. An inline completion also signals it; the waiter drains it.
//
// Without io_uring (older kernel, kernel.io_uring_disabled, a seccomp
// filter) or once the ring fails, the writes are ordinary; nothing else
// changes. A write the kernel took is always waited for, whatever happens,
// so no write is ever in flight from a buffer the caller reuses, and a
// write reported done has completed in full (a short one is finished).
// One consequence: the kernel releases a file its workers wrote to a
// moment after the spool closed it, so an unmount right after Close can
// find the file system busy.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	opWrite           = 23     // IORING_OP_WRITE
	registerEventfd   = 4      // IORING_REGISTER_EVENTFD
	featSingleMmap    = 1      // IORING_FEAT_SINGLE_MMAP (5.4)
	featNativeWorkers = 1 << 9 // IORING_FEAT_NATIVE_WORKERS (5.12)
	offSQRing         = 0
	offSQEs           = 0x10000000
	uringEntries      = 4
	sqeSize, cqeSize  = 64, 16
)

// The kernel's struct io_sqring_offsets, io_cqring_offsets and
// io_uring_params (include/uapi/linux/io_uring.h): 40, 40 and 120 bytes,
// the same on 32-bit arm (the uint64s fall on 8-byte offsets anyway);
// TestURingLayout checks it.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// uring is one ring for a spool's writes; nil when io_uring is not
// available (old kernel, disabled, filtered by seccomp): writes are then
// ordinary.
type uring struct {
	mu     sync.Mutex
	broken bool          // an error left the ring unusable: writes are ordinary from then on
	seq    uint64        // user_data of the last write submitted
	writes atomic.Uint64 // writes completed through the ring (tests)
	fd     int
	ring   []byte // SQ and CQ rings (one mapping)
	sqes   []byte
	p      uringParams
	event  *os.File // eventfd, in the Go poller
	erc    syscall.RawConn
	// The wait for a completion on the eventfd (write): the poller's
	// callback and what it found, kept here so that a wait allocates
	// nothing (a closure and its captured results were garbage per
	// write, issue 16). Guarded by mu.
	onEvent func(efd uintptr) bool
	res     int32
	got     bool

	onBreak func(error) // told once why the ring was given up (the spool logs it)
}

// giveUp stops using the ring: from now on every write is ordinary.
// Caller holds mu.
func (u *uring) giveUp(why error) {
	if u.broken {
		return
	}
	u.broken = true
	if u.onBreak != nil {
		u.onBreak(why)
	}
}

func newURing() (*uring, error) {
	u := &uring{}
	u.onEvent = u.reapOrDrain
	fd, _, e := syscall.RawSyscall(unix.SYS_IO_URING_SETUP, uringEntries, uintptr(unsafe.Pointer(&u.p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	u.fd = int(fd)
	// 5.4 and 5.5 (Ubuntu 20.04's kernels) set up a ring but have no
	// IORING_OP_WRITE: every write would complete with EINVAL. Before 5.12
	// the ring is charged to RLIMIT_MEMLOCK and completions ran on older
	// task_work and io-wq code. So only from 5.12 on.
	if u.p.features&featSingleMmap == 0 || u.p.features&featNativeWorkers == 0 {
		syscall.Close(u.fd)
		return nil, errors.New("io_uring: kernel older than 5.12")
	}
	size := max(int(u.p.sqOff.array)+int(u.p.sqEntries)*4, int(u.p.cqOff.cqes)+int(u.p.cqEntries)*cqeSize)
	ring, err := syscall.Mmap(u.fd, offSQRing, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		syscall.Close(u.fd)
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	sqes, err := syscall.Mmap(u.fd, offSQEs, int(u.p.sqEntries)*sqeSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		syscall.Munmap(ring)
		syscall.Close(u.fd)
		return nil, fmt.Errorf("io_uring mmap sqes: %w", err)
	}
	u.ring, u.sqes = ring, sqes
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		u.close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// The kernel reads an int (__s32) here: not a uintptr, whose first
	// four bytes are not the fd on a big-endian 64-bit machine.
	efd32 := int32(efd)
	if _, _, e := syscall.RawSyscall6(unix.SYS_IO_URING_REGISTER, uintptr(u.fd), registerEventfd, uintptr(unsafe.Pointer(&efd32)), 1, 0, 0); e != 0 {
		syscall.Close(efd)
		u.close()
		return nil, fmt.Errorf("io_uring register eventfd: %w", e)
	}
	u.event = os.NewFile(uintptr(efd), "io_uring-eventfd")
	if u.erc, err = u.event.SyscallConn(); err != nil {
		u.close()
		return nil, fmt.Errorf("io_uring eventfd: %w", err)
	}
	return u, nil
}

func (u *uring) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&u.ring[off])) }

// close releases the ring. No write is in flight: each is waited for.
func (u *uring) close() {
	if u.event != nil {
		u.event.Close()
	}
	if u.sqes != nil {
		syscall.Munmap(u.sqes)
	}
	if u.ring != nil {
		syscall.Munmap(u.ring)
	}
	syscall.Close(u.fd)
}

// errRingBroken is why a write goes the ordinary way after all: the ring
// failed before the kernel took the write, so nothing of it is in flight.
var errRingBroken = errors.New("io_uring unusable")

// writeAt writes all of b at off of f through the ring; b must be a heap
// buffer (the kernel writes from it while the goroutine waits). A ring
// that fails is not used again: its write, and every later one, is
// ordinary. A write the ring completed with an error is done again the
// ordinary way, and that write's result is returned: whatever the ring's
// error (EINTR, EAGAIN, ECANCELED when the submitting thread exited, a
// file system that refuses io_uring's writes), the caller sees what an
// ordinary write would have given it (ENOSPC on a full disk).
func (u *uring) writeAt(f *os.File, b []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.broken {
		return f.WriteAt(b, off)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return f.WriteAt(b, off)
	}
	done := 0
	for done < len(b) {
		var res int32
		var werr error
		if err := rc.Control(func(fd uintptr) { res, werr = u.write(fd, b[done:], off+int64(done)) }); err != nil {
			return done, &os.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		if werr != nil || res <= 0 {
			// Not taken (nothing in flight), or completed with an error or
			// nothing written: the rest the ordinary way.
			n, err := f.WriteAt(b[done:], off+int64(done))
			return done + n, err
		}
		u.writes.Add(1)
		done += int(res) // a short write: its rest is submitted next
	}
	runtime.KeepAlive(b)
	return done, nil
}

// write submits one write and waits for its completion. It returns an
// error only when the kernel did not take the write (the ring is then
// marked broken); once taken, it waits for the completion, whatever
// happens, so that no write is ever left in flight from a buffer the
// caller reuses. Caller holds mu and f's descriptor (Control).
func (u *uring) write(fd uintptr, b []byte, off int64) (int32, error) {
	sq := &u.p.sqOff
	tail := atomic.LoadUint32(u.u32(sq.tail))
	mask := *u.u32(sq.ringMask)
	i := tail & mask
	sqe := u.sqes[i*sqeSize : (i+1)*sqeSize]
	clear(sqe)
	u.seq++
	sqe[0] = opWrite
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[8])) = uint64(off)
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(&b[0])))
	*(*uint32)(unsafe.Pointer(&sqe[24])) = uint32(len(b))
	*(*uint64)(unsafe.Pointer(&sqe[32])) = u.seq
	*(*uint32)(unsafe.Pointer(&u.ring[sq.array+i*4])) = i
	atomic.StoreUint32(u.u32(sq.tail), tail+1)
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd), 1, 0, 0, 0, 0)
		if e == 0 && n == 1 {
			break
		}
		// Whether the kernel took the entry is told by the ring's head,
		// not by the error: one it took is in flight and must be waited
		// for, whatever enter returned.
		if atomic.LoadUint32(u.u32(sq.head)) != tail {
			break
		}
		if e == syscall.EINTR {
			continue
		}
		// Not taken (EAGAIN, EBUSY: the kernel is short of memory or of
		// room for completions; a ring gone bad). The entry stays in the
		// ring, so the ring is never entered again.
		u.giveUp(fmt.Errorf("io_uring_enter: %w", e))
		return 0, errRingBroken
	}
	for {
		if res, ok := u.reap(); ok {
			u.drain()
			return res, nil
		}
		// Not completed inline: wait for the eventfd in the poller.
		u.got = false
		err := u.erc.Read(u.onEvent)
		if u.got {
			return u.res, nil
		}
		if err != nil {
			// The poller failed us, but the write is the kernel's: poll
			// the ring until it is done, then use the ring no more.
			u.giveUp(fmt.Errorf("io_uring eventfd: %w", err))
			for {
				if res, ok := u.reap(); ok {
					return res, nil
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// reapOrDrain is the eventfd's wait (write's, through the poller): true
// once the write's completion is reaped (in u.res, u.got), else the
// eventfd is reset and the poller waits for it again. Caller holds mu.
func (u *uring) reapOrDrain(efd uintptr) bool {
	if u.res, u.got = u.reap(); u.got {
		return true
	}
	var buf [8]byte
	syscall.RawSyscall(syscall.SYS_READ, efd, uintptr(unsafe.Pointer(&buf[0])), 8)
	u.res, u.got = u.reap()
	return u.got
}

// drain resets the eventfd an inline completion signalled, so the poller
// does not find it readable later for nothing.
func (u *uring) drain() {
	u.erc.Control(func(efd uintptr) {
		var buf [8]byte
		syscall.RawSyscall(syscall.SYS_READ, efd, uintptr(unsafe.Pointer(&buf[0])), 8)
	})
}

// reap takes the completion of the last write submitted if it is there;
// any other (never expected: one write is in flight at a time) is
// dropped.
func (u *uring) reap() (int32, bool) {
	cq := &u.p.cqOff
	for {
		head := atomic.LoadUint32(u.u32(cq.head))
		if head == atomic.LoadUint32(u.u32(cq.tail)) {
			return 0, false
		}
		at := cq.cqes + (head&*u.u32(cq.ringMask))*cqeSize
		data := *(*uint64)(unsafe.Pointer(&u.ring[at]))
		res := *(*int32)(unsafe.Pointer(&u.ring[at+8]))
		atomic.StoreUint32(u.u32(cq.head), head+1)
		if data == u.seq {
			return res, true
		}
	}
}
