package testutil

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// Pty opens a pseudo-terminal and returns its master and its slave, both
// closed when the test ends. The master is non-blocking, so it is served
// by the runtime's poller: it has deadlines, and Close interrupts a Read
// (a blocking master's Read can be interrupted by neither, and its
// descriptor stays open while a Read is blocked, so the slave never sees
// the hang-up).
func Pty(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	var n uint32
	err = ioctl(m, syscall.TIOCSPTLCK, unsafe.Pointer(&n)) // unlock the slave
	if err == nil {
		err = ioctl(m, syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err == nil {
		slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		m.Close()
		t.Fatalf("pseudo-terminal: %v", err)
	}
	t.Cleanup(func() {
		m.Close()
		slave.Close()
	})
	return m, slave
}

func ioctl(f *os.File, req uint, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
