package bridge

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestRawSocketOnlyForPlainTCP: a tcp:// uplink reads and writes through
// internal/sockio (conn.go meteredConn: the runtime's sysmon is not woken
// by its traffic), and its bytes, deadlines and close behave as the net
// package's; a TLS one (and a WebSocket one, not a *net.TCPConn either)
// keeps the ordinary calls.
func TestRawSocketOnlyForPlainTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var lastRead atomic.Int64
	mc := newMeteredConn(c, &lastRead, nil)
	if mc.raw == nil {
		t.Fatal("a plain TCP uplink has no raw socket: its reads and writes would wake sysmon")
	}
	if tc := newMeteredConn(tls.Client(c, &tls.Config{InsecureSkipVerify: true}), &lastRead, nil); tc.raw != nil {
		t.Fatal("a TLS uplink got a raw socket: its bytes would bypass TLS")
	}

	if n, err := mc.Write([]byte("ping")); n != 4 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, []byte("ping")) {
		t.Fatalf("the peer read %q, %v", got, err)
	}
	peer.Write([]byte("pong"))
	if _, err := io.ReadFull(mc, got); err != nil || !bytes.Equal(got, []byte("pong")) || lastRead.Load() == 0 {
		t.Fatalf("read %q, %v, last read %d", got, err, lastRead.Load())
	}
	mc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := mc.Read(got); err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past its deadline: %v; want a timeout", err)
	}
}
