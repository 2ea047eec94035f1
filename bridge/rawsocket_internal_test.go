package bridge

import (
	"crypto/tls"
	"net"
	"testing"
)

// TestRawSocketOnlyForPlainTCP: a tcp:// uplink reads and writes through
// internal/sockio (conn.go rawSocket: the runtime's sysmon is not woken by
// its traffic); a TLS one (and a WebSocket one, not a *net.TCPConn
// either) keeps the ordinary calls.
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
	if rawSocket(c) == nil {
		t.Fatal("a plain TCP uplink has no raw socket: its reads and writes would wake sysmon")
	}
	if rawSocket(tls.Client(c, &tls.Config{InsecureSkipVerify: true})) != nil {
		t.Fatal("a TLS uplink got a raw socket: its bytes would bypass TLS")
	}
}
