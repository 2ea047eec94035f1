package sockio

import (
	"bytes"
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
// reader's close reasons are built on (gateway/reader.go readFailed, the bridge's uplink): input,
// nothing yet (ErrWouldBlock, only when not waiting), a wait that input
// ends, the keepalive deadline (a timeout net.Error), a local close
// (net.ErrClosed) and the peer's close (io.EOF).
func TestRawReadKeepsConnReadSemantics(t *testing.T) {
	srv, raw, peer := socketPair(t)
	buf := make([]byte, 16)

	if n, err := Read(raw, buf, false); n != 0 || err != ErrWouldBlock {
		t.Fatalf("empty socket, no wait: %d, %v; want 0, ErrWouldBlock", n, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); peer.Write([]byte("hello")) }()
	if n, err := Read(raw, buf, true); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("waiting read: %q, %v; want hello", buf[:n], err)
	}

	srv.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := Read(raw, buf, true)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v; want a timeout", err)
	}
	srv.SetReadDeadline(time.Time{})

	peer.Close()
	if _, err := Read(raw, buf, true); err != io.EOF {
		t.Fatalf("peer closed: %v; want io.EOF", err)
	}
	srv.Close()
	if _, err := Read(raw, buf, true); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed locally: %v; want net.ErrClosed", err)
	}
}

// TestRawReadCloseEndsAWait: closing the connection (what Server.Close and
// a takeover do) ends a reader waiting in Read, as it ends conn.Read.
func TestRawReadCloseEndsAWait(t *testing.T) {
	srv, raw, _ := socketPair(t)
	closeWhileWaiting(t, srv, "Read", func() error {
		_, err := Read(raw, make([]byte, 1), true)
		return err
	})
}

// closeWhileWaiting runs op, which waits on the socket, closes it
// (srv.Close) meanwhile, and wants op to end with net.ErrClosed.
func closeWhileWaiting(t *testing.T, srv interface{ Close() error }, what string, op func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	time.Sleep(20 * time.Millisecond) // let it wait (the result is the same if it has not yet)
	srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("%s: got %v; want net.ErrClosed", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a waiting %s outlived its connection", what)
	}
}

// TestRawWriteTakesWhatFits: a write never waits: it takes what the
// kernel's buffer has room for and reports 0 once it is full, so an
// inline flush (gateway/writer.go) hands the rest to a writer goroutine.
func TestRawWriteTakesWhatFits(t *testing.T) {
	_, raw, peer := socketPair(t)
	chunk := make([]byte, 64<<10)
	total := 0
	for i := 0; ; i++ {
		n, err := TryWrite(raw, chunk)
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
		_, err2 = TryWrite(raw, chunk[:1])
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
	o := newOp()
	sent := make([]byte, 2) // what the two writes sent
	allocs := testing.AllocsPerRun(200, func() {
		peer.Write(buf)
		if _, err := o.readVia(raw, buf, true); err != nil {
			t.Fatal(err)
		}
		if _, err := o.tryWriteVia(raw, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := o.writeVia(raw, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, sent); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per read and write; want 0", allocs)
	}
}

// TestWriteWaitsForRoomUntilTheDeadline: Write is conn.Write (the bridge's
// uplink writes with it): it writes all of p, waiting while the socket is
// full, and a peer that stops reading ends it at the write deadline with a
// timeout and what was written so far.
func TestWriteWaitsForRoomUntilTheDeadline(t *testing.T) {
	srv, raw, peer := socketPair(t)
	p := make([]byte, 8<<20) // far more than the socket buffers hold
	// Not periodic: a resume at a wrong offset shows in the comparison.
	for i := range p {
		p[i] = byte(i*7 + i>>8 + i>>16)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(p))))
		got <- b
	}()
	srv.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if n, err := Write(raw, p); n != len(p) || err != nil {
		t.Fatalf("Write to a reading peer: %d of %d, %v", n, len(p), err)
	}
	if b := <-got; !bytes.Equal(b, p) {
		t.Fatalf("peer read %d bytes, not what was written", len(b))
	}

	// The peer reads nothing more: the write stops at the deadline. 64 MiB:
	// far beyond what loopback's autotuned buffers hold (8 MiB fitted).
	big := make([]byte, 64<<20)
	srv.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := Write(raw, big)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || n >= len(big) {
		t.Fatalf("Write to a peer that reads nothing: %d of %d, %v; want a timeout", n, len(big), err)
	}
}
