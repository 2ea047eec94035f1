package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// socketPair is a connected TCP pair on 127.0.0.1: the server side's
// RawConn (what sockio works on) and the client side to drive it.
func socketPair(t *testing.T) (srv *net.TCPConn, raw syscall.RawConn, peer net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	srv = c.(*net.TCPConn)
	raw, err = srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); peer.Close() })
	return srv, raw, peer
}

// TestRawReadKeepsConnReadSemantics: the reads that go around the
// scheduler (sockio.go) end the way conn.Read does, which is what the
// reader's close reasons are built on (reader.go readFailed): input,
// nothing yet (errWouldBlock, only when not waiting), a wait that input
// ends, the keepalive deadline (a timeout net.Error), a local close
// (net.ErrClosed) and the peer's close (io.EOF).
func TestRawReadKeepsConnReadSemantics(t *testing.T) {
	srv, raw, peer := socketPair(t)
	buf := make([]byte, 16)

	if n, err := rawRead(raw, buf, false); n != 0 || err != errWouldBlock {
		t.Fatalf("empty socket, no wait: %d, %v; want 0, errWouldBlock", n, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); peer.Write([]byte("hello")) }()
	if n, err := rawRead(raw, buf, true); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("waiting read: %q, %v; want hello", buf[:n], err)
	}

	srv.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := rawRead(raw, buf, true)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v; want a timeout", err)
	}
	srv.SetReadDeadline(time.Time{})

	peer.Close()
	if _, err := rawRead(raw, buf, true); err != io.EOF {
		t.Fatalf("peer closed: %v; want io.EOF", err)
	}
	srv.Close()
	if _, err := rawRead(raw, buf, true); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed locally: %v; want net.ErrClosed", err)
	}
}

// TestRawReadCloseEndsAWait: closing the connection (what Server.Close and
// a takeover do) ends a reader waiting in rawRead, as it ends conn.Read.
func TestRawReadCloseEndsAWait(t *testing.T) {
	srv, raw, _ := socketPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := rawRead(raw, make([]byte, 1), true)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it wait (the result is the same if it has not yet)
	srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting rawRead outlived its connection")
	}
}

// TestRawWriteTakesWhatFits: a write never waits: it takes what the
// kernel's buffer has room for and reports 0 once it is full, so an
// inline flush (writer.go) hands the rest to a writer goroutine.
func TestRawWriteTakesWhatFits(t *testing.T) {
	_, raw, peer := socketPair(t)
	chunk := make([]byte, 64<<10)
	total := 0
	for i := 0; ; i++ {
		n, err := rawWrite(raw, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
		if i > 10000 {
			t.Fatal("the socket never filled: 640 MiB taken by a peer that reads nothing")
		}
	}
	got, err := io.ReadFull(peer, make([]byte, total))
	if err != nil || got != total {
		t.Fatalf("peer read %d of %d: %v", got, total, err)
	}
	peer.Close()
	var err2 error
	for i := 0; i < 1000 && err2 == nil; i++ { // the peer's RST arrives after its FIN
		_, err2 = rawWrite(raw, chunk[:1])
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err2, syscall.EPIPE) && !errors.Is(err2, syscall.ECONNRESET) {
		t.Fatalf("write to a closed peer: %v; want EPIPE or ECONNRESET", err2)
	}
}

// TestSockIOAllocatesNothing: an op with its callbacks bound once is what
// lets a reading cost no allocation (a closure handed to RawConn escapes:
// two or three allocations per read before). The ops are pooled; the pool
// itself is not measured (under -race it drops a quarter of what is put).
func TestSockIOAllocatesNothing(t *testing.T) {
	_, raw, peer := socketPair(t)
	buf := make([]byte, 1)
	o := newSockOp()
	allocs := testing.AllocsPerRun(200, func() {
		peer.Write(buf)
		if _, err := o.readVia(raw, buf, true); err != nil {
			t.Fatal(err)
		}
		if _, err := o.writeVia(raw, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per read and write; want 0", allocs)
	}
}
