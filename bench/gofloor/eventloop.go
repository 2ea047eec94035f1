//go:build linux

package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// eventLoop is the one-loop design: raw non-blocking sockets in an epoll
// set of its own, waited on with the Go poller through the epoll
// descriptor (an epoll set is readable while it has ready sockets), so no
// thread sits blocked in epoll_wait holding the processor. Reads and
// writes are raw system calls, as edgegw's internal/sockio makes them.
type eventLoop struct {
	ep, lfd int
	in      map[int][]byte // each connection's unparsed input
	subs    []int
	up      int // -1 without -upstream
	upID    uint16
}

func runEventLoop(addr, upstream string) error {
	port, err := loopbackPort(addr)
	if err != nil {
		return err
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := syscall.Listen(lfd, 4096); err != nil {
		return err
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	l := &eventLoop{ep: ep, lfd: lfd, in: map[int][]byte{}, up: -1}
	l.watch(lfd)
	if upstream != "" {
		uport, err := loopbackPort(upstream)
		if err != nil {
			return err
		}
		ufd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := syscall.Connect(ufd, &syscall.SockaddrInet4{Port: uport, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return fmt.Errorf("upstream %s: %w", upstream, err)
		}
		syscall.SetsockoptInt(ufd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		syscall.SetNonblock(ufd, true)
		rawWrite(ufd, connectPacket("gofloor-up"))
		l.up = ufd
		l.watch(ufd)
	}
	// os.NewFile registers a non-blocking descriptor with the Go poller.
	if err := syscall.SetNonblock(ep, true); err != nil {
		return err
	}
	rc, err := os.NewFile(uintptr(ep), "epoll").SyscallConn()
	if err != nil {
		return err
	}
	events := make([]syscall.EpollEvent, 64)
	buf := make([]byte, 4096)
	for {
		var n int
		err := rc.Read(func(fd uintptr) bool {
			n = epollWaitNow(int(fd), events)
			return n > 0
		})
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			switch fd := int(ev.Fd); fd {
			case lfd:
				l.accept()
			case l.up:
				// Its CONNACK and PUBACKs. At its end of input the socket
				// stays readable in the level-triggered set: a floor that
				// went on would spin and bridge nothing.
				if !drain(fd, buf) {
					return fmt.Errorf("upstream %s closed the bridge", upstream)
				}
			default:
				l.readable(fd, buf)
			}
		}
	}
}

func (l *eventLoop) watch(fd int) {
	syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)})
}

func (l *eventLoop) accept() {
	for {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		l.in[fd] = nil
		l.watch(fd)
	}
}

func (l *eventLoop) drop(fd int) {
	syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, fd, nil)
	syscall.Close(fd)
	delete(l.in, fd)
	for i, s := range l.subs {
		if s == fd {
			l.subs = append(l.subs[:i], l.subs[i+1:]...)
			break
		}
	}
}

// readable reads once (the set is level-triggered: more input wakes the
// loop again) and handles every whole packet.
func (l *eventLoop) readable(fd int, buf []byte) {
	n := rawRead(fd, buf)
	if n < 0 {
		return
	}
	if n == 0 {
		l.drop(fd)
		return
	}
	// Parse in place unless a packet was split across reads: an append
	// to an empty l.in[fd] would allocate on every reading.
	in := buf[:n]
	if len(l.in[fd]) > 0 {
		in = append(l.in[fd], in...)
	}
	for {
		pk, rest, ok := nextPacket(in)
		if !ok {
			break
		}
		if !l.handle(fd, pk) {
			return
		}
		in = rest
	}
	l.in[fd] = nil
	if len(in) > 0 { // a copy: buf is the next read's
		l.in[fd] = append([]byte(nil), in...)
	}
}

// drain reads fd until nothing is waiting; false at its end of input.
func drain(fd int, buf []byte) bool {
	for {
		switch rawRead(fd, buf) {
		case -1:
			return true
		case 0:
			return false
		}
	}
}

// nextPacket splits one whole packet off the front of in.
func nextPacket(in []byte) (pk, rest []byte, ok bool) {
	n, i := 0, 1
	for shift := 0; ; shift += 7 {
		if i >= len(in) {
			return nil, in, false
		}
		d := in[i]
		i++
		n |= int(d&0x7f) << shift
		if d&0x80 == 0 {
			break
		}
	}
	if len(in) < i+n {
		return nil, in, false
	}
	return in[:i+n], in[i+n:], true
}

// handle answers one packet; false when the connection was closed.
func (l *eventLoop) handle(fd int, pk []byte) bool {
	h, body := pk[0], pk[headerLen(pk):]
	switch h >> 4 {
	case 1: // CONNECT
		rawWrite(fd, []byte{0x20, 2, 0, 0})
	case 8: // SUBSCRIBE
		rawWrite(fd, subackFor(body))
		l.subs = append(l.subs, fd)
	case 3: // PUBLISH
		for _, s := range l.subs {
			rawWrite(s, pk)
		}
		if h>>1&3 == 1 {
			at := publishID(body)
			id0, id1 := body[at], body[at+1]
			if l.up >= 0 {
				id := nextID(&l.upID)
				body[at], body[at+1] = byte(id>>8), byte(id)
				rawWrite(l.up, pk)
			}
			rawWrite(fd, []byte{0x40, 2, id0, id1})
		}
	case 12: // PINGREQ
		rawWrite(fd, []byte{0xd0, 0})
	case 14: // DISCONNECT
		l.drop(fd)
		return false
	}
	return true
}

// rawWrite writes b without the scheduler's system-call bookkeeping (the
// socket never blocks). A short write is dropped: at sensor rates on
// loopback the socket buffers never fill.
func rawWrite(fd int, b []byte) {
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
}

// epollWaitNow collects the set's ready events without waiting (the Go
// poller does the waiting). Raw, as rawRead and rawWrite: an ordinary
// system call (syscall.EpollWait) tells the scheduler it may block, and
// the first one after the process went idle wakes the runtime's monitor
// thread (sysmon); at sensor rates that is every reading (internal/sockio
// says why edgegw avoids it). With a zero timeout it cannot return EINTR;
// an error counts as no events.
func epollWaitNow(ep int, events []syscall.EpollEvent) int {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0
	}
	return int(n)
}

// rawRead returns the bytes read, 0 at end of input or on an error, -1
// when nothing is waiting.
func rawRead(fd int, b []byte) int {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	switch {
	case e == syscall.EAGAIN:
		return -1
	case e != 0:
		return 0
	}
	return int(n)
}
