package bridge

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeteredConnRawSocket: the engine's transport over a plain TCP
// socket reads and writes through internal/sockio (no ordinary system
// call to wake the runtime's sysmon whenever upstream's acks arrive), and
// keeps what bridge/wire relies on: the bytes, the read time stamp, a
// write deadline reported as a net.Error timeout (wire.ErrWriteTimeout),
// and a close that ends a waiting read.
func TestMeteredConnRawSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var lastRead atomic.Int64
	mc := newMeteredConn(nc, &lastRead, nil)
	if mc.raw == nil {
		t.Fatal("a plain TCP socket got no raw socket")
	}

	if _, err := mc.Write([]byte("to upstream")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("to upstream"))
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "to upstream" {
		t.Fatalf("upstream read %q, %v", got, err)
	}
	if _, err := peer.Write([]byte("ack")); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 3)
	if _, err := io.ReadFull(mc, got); err != nil || string(got) != "ack" {
		t.Fatalf("read %q, %v", got, err)
	}
	if lastRead.Load() == 0 {
		t.Fatal("a read that returned data did not stamp lastRead")
	}

	// A peer that reads nothing: the socket fills, and the write deadline
	// ends the write with a timeout.
	if err := mc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<20)
	_, err = mc.Write(big)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a full socket past its deadline: %v, want a net.Error timeout", err)
	}

	// A close ends a read that waits.
	readErr := make(chan error, 1)
	go func() {
		_, err := mc.Read(make([]byte, 16))
		readErr <- err
	}()
	mc.Close()
	if err := <-readErr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v, want net.ErrClosed", err)
	}
}
