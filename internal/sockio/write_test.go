package sockio

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// fillSocket writes to raw until the kernel's buffers are full.
func fillSocket(t *testing.T, raw syscall.RawConn) {
	t.Helper()
	chunk := make([]byte, 64<<10)
	for i := 0; i < 10000; i++ {
		n, err := TryWrite(raw, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the socket never filled: 640 MiB taken by a peer that reads nothing")
}

// TestWriteEndsTheWayConnWriteDoes: the errors a writer over a socket
// tells apart: a close while Write waits for room
// (abort) and after it end with net.ErrClosed, a deadline already past
// with a timeout before anything is written, a peer's reset with EPIPE or
// ECONNRESET.
func TestWriteEndsTheWayConnWriteDoes(t *testing.T) {
	t.Run("closed while waiting", func(t *testing.T) {
		srv, raw, _ := socketPair(t)
		fillSocket(t, raw)
		closeWhileWaiting(t, srv, "Write", func() error {
			_, err := Write(raw, make([]byte, 1<<20))
			return err
		})
		if n, err := Write(raw, []byte("x")); n != 0 || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after close: %d, %v; want 0, net.ErrClosed", n, err)
		}
	})
	t.Run("deadline past", func(t *testing.T) {
		srv, raw, _ := socketPair(t)
		srv.SetWriteDeadline(time.Now().Add(-time.Second))
		n, err := Write(raw, []byte("x"))
		var ne net.Error
		if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %d, %v; want 0 and a timeout", n, err)
		}
	})
	t.Run("peer reset", func(t *testing.T) {
		_, raw, peer := socketPair(t)
		peer.(*net.TCPConn).SetLinger(0) // its close sends RST
		peer.Close()
		var err error
		for i := 0; i < 1000 && err == nil; i++ { // until the RST has arrived
			_, err = Write(raw, []byte("x"))
			time.Sleep(time.Millisecond)
		}
		var ne net.Error
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("got %v; want EPIPE or ECONNRESET", err)
		}
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("a reset is not a timeout: %v", err)
		}
	})
}
