package testutil

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer answers every connection by writing back what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes b and reads len(want) bytes back (at most 10 s).
func roundTrip(t *testing.T, c net.Conn, b, want []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back %q: %v", want, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %q, want %q", got, want)
	}
}

// closedByPeer reports whether c reads EOF or a reset (within 10 s).
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestProxyForwardsAndCounts(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dialProxy(t, p)
	roundTrip(t, c, []byte("hello"), []byte("hello"))
	Eventually(t, 10*time.Second, "5 bytes counted each way", func() bool { return p.Bytes(Up) == 5 && p.Bytes(Down) == 5 })
}

func TestProxyDelay(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	const d = 200 * time.Millisecond
	p.SetDelay(Down, d)
	c := dialProxy(t, p)
	start := time.Now()
	roundTrip(t, c, []byte("x"), []byte("x"))
	if took := time.Since(start); took < d {
		t.Fatalf("round trip took %s through a %s delay", took, d)
	}
}

func TestProxyCutAndRefuse(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dialProxy(t, p)
	roundTrip(t, c, []byte("a"), []byte("a"))
	p.Cut()
	if !closedByPeer(t, c) {
		t.Fatal("a connection survived Cut")
	}
	p.Refuse(true)
	if !closedByPeer(t, dialProxy(t, p)) {
		t.Fatal("a connection made while refusing was forwarded")
	}
	p.Refuse(false)
	roundTrip(t, dialProxy(t, p), []byte("b"), []byte("b"))
}

func TestProxyFreeze(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dialProxy(t, p)
	roundTrip(t, c, []byte("a"), []byte("a"))
	p.Freeze()
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	// Nothing crosses while frozen: a short read finds nothing, and the
	// proxy wrote nothing more towards the target.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%v) through a frozen proxy", n, err)
	}
	if n := p.Bytes(Up); n != 1 {
		t.Fatalf("a frozen proxy wrote %d bytes up, want the 1 from before", n)
	}
	p.Thaw()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 1)
	if _, err := io.ReadFull(c, got); err != nil || got[0] != 'b' {
		t.Fatalf("after Thaw read %q, %v; want \"b\"", got, err)
	}
}

// The filter sees whole MQTT packets even when they arrive split or
// several in one write; Drop loses one packet, Sink that one and all that
// follow on the connection.
func TestProxyFilter(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	pingreq := []byte{0xc0, 0x00}
	puback := func(id byte) []byte { return []byte{0x40, 0x02, 0x00, id} }
	pubrel := []byte{0x62, 0x02, 0x00, 0x09}
	var mu sync.Mutex
	var seen [][]byte
	p.Filter(Up, func(pkt []byte) Verdict {
		mu.Lock()
		seen = append(seen, append([]byte(nil), pkt...))
		mu.Unlock()
		switch {
		case pkt[0] == 0x40 && pkt[3] == 2:
			return Drop
		case pkt[0] == 0x62:
			return Sink
		}
		return Pass
	})
	c := dialProxy(t, p)
	// Two packets and half of a third in one write, the rest in another.
	first := append(append(append([]byte(nil), puback(1)...), puback(2)...), puback(3)[:1]...)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, puback(3)[1:], append(puback(1), puback(3)...))
	if _, err := c.Write(append(pubrel, pingreq...)); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "the filter sees the PUBREL", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 4
	})
	p.Filter(Up, nil) // a new connection forwards everything again
	roundTrip(t, dialProxy(t, p), pingreq, pingreq)
	// Past the PUBREL nothing crosses: the PINGREQ after it is gone too.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%v) after a sunk packet", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][]byte{puback(1), puback(2), puback(3), pubrel}
	if len(seen) != len(want) {
		t.Fatalf("filter saw %x, want %x", seen, want)
	}
	for i := range want {
		if !bytes.Equal(seen[i], want[i]) {
			t.Fatalf("filter saw %x, want %x", seen, want)
		}
	}
	if n := p.Bytes(Up); n != 8+2 {
		t.Fatalf("proxy wrote %d bytes up, want 10 (two PUBACKs, one PINGREQ)", n)
	}
}

func TestMQTTPacketLen(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		n    int
		full bool
	}{
		{nil, 0, false},
		{[]byte{0xc0}, 0, false},
		{[]byte{0xc0, 0x00}, 2, true},
		{[]byte{0x30, 0x03, 'a'}, 5, false},
		{[]byte{0x30, 0x80, 0x01}, 131, false},                 // 128 in two bytes
		{[]byte{0x30, 0x80, 0x80, 0x80, 0x01}, 2097157, false}, // the longest length, 4 bytes
		{[]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}, 0, false}, // a fifth length byte is never read
	} {
		if n, full := MQTTPacketLen(tc.b); n != tc.n || full != tc.full {
			t.Errorf("MQTTPacketLen(%x) = %d, %v; want %d, %v", tc.b, n, full, tc.n, tc.full)
		}
	}
}

// Held packets wait while later ones pass, and go in order as Allow and
// Release let them; Allow(-1) lets every one go, the held and the later.
func TestProxyHold(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	puback := func(id byte) []byte { return []byte{0x40, 0x02, 0x00, id} }
	pingreq := []byte{0xc0, 0x00}
	p.Filter(Down, func(pkt []byte) Verdict {
		if pkt[0] == 0x40 {
			return Hold
		}
		return Pass
	})
	p.Allow(Down, 1)
	c := dialProxy(t, p)
	roundTrip(t, c, puback(1), puback(1)) // the one allowed
	if _, err := c.Write(append(puback(2), puback(3)...)); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "two held", func() bool { h, a := p.Held(Down); return h == 2 && a == 0 })
	roundTrip(t, c, pingreq, pingreq) // passes the held ones
	p.Release(Down, 1)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, puback(2)) {
		t.Fatalf("after Release(1) read %x, %v; want %x, the oldest held", got, err, puback(2))
	}
	if h, a := p.Held(Down); h != 1 || a != 0 {
		t.Fatalf("Held = %d, %d after one released; want 1, 0", h, a)
	}
	p.Allow(Down, -1)
	roundTrip(t, c, puback(4), append(puback(3), puback(4)...))
	if h, a := p.Held(Down); h != 0 || a >= 0 {
		t.Fatalf("Held = %d, %d after Allow(-1); want 0 and all allowed", h, a)
	}
}

// A Close verdict closes the connection at that packet, after what came
// before it crossed both ways.
func TestProxyClose(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	p.Filter(Up, func(pkt []byte) Verdict {
		if pkt[0] == 0xe0 { // DISCONNECT
			return Close
		}
		return Pass
	})
	c := dialProxy(t, p)
	pingreq := []byte{0xc0, 0x00}
	roundTrip(t, c, pingreq, pingreq)
	if _, err := c.Write(append([]byte{0xe0, 0x00}, pingreq...)); err != nil {
		t.Fatal(err)
	}
	if !closedByPeer(t, c) {
		t.Fatal("the connection outlived a Close verdict")
	}
	if n := p.Bytes(Up); n != 2 {
		t.Fatalf("proxy wrote %d bytes up, want the 2 before the Close", n)
	}
}

// SetRate spaces what it writes by the link's bandwidth: 2 KiB at 8 KiB/s
// take a quarter of a second at least (a lower bound: a slow machine only
// makes it slower).
func TestProxyRate(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	p.SetRate(Down, 8<<10)
	c := dialProxy(t, p)
	b := bytes.Repeat([]byte("r"), 2<<10)
	start := time.Now()
	roundTrip(t, c, b, b)
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("2 KiB crossed an 8 KiB/s link in %s", took)
	}
}
