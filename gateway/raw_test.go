package gateway_test

// rawClient is a minimal MQTT client built directly on the packet codec, for
// tests that need to misbehave (never ack, stop reading, send bad bytes) or
// to see exactly what the broker puts on the wire.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

type rawClient struct {
	t    testing.TB
	conn net.Conn
	v    packet.Version
	br   *bufio.Reader

	wmu sync.Mutex

	// Set before start; called on the reader goroutine for every packet.
	// It returns true when it consumed the packet (it is not queued on in).
	hook func(rc *rawClient, p packet.Packet) bool

	in      chan packet.Packet
	done    chan struct{} // closed when the reader goroutine has ended
	readErr error         // valid after done is closed
	stop    chan struct{}
	once    sync.Once
	started bool
}

// rawDial opens a TCP connection; nothing is sent and no reader runs.
func rawDial(t testing.TB, addr string, v packet.Version) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rc := newRawConn(t, c, v)
	t.Cleanup(rc.close)
	return rc
}

// newRawConn wraps an open connection. It does not fail the test, so it may
// be used on any goroutine; the caller closes it.
func newRawConn(t testing.TB, c net.Conn, v packet.Version) *rawClient {
	return &rawClient{t: t, conn: c, v: v, br: bufio.NewReaderSize(c, 64<<10),
		in: make(chan packet.Packet, 8192), done: make(chan struct{}), stop: make(chan struct{})}
}

// close closes the socket and waits for the reader goroutine.
func (rc *rawClient) close() {
	rc.once.Do(func() { close(rc.stop) })
	rc.conn.Close()
	if rc.started {
		<-rc.done
	}
}

// start runs the reader goroutine: it decodes packets and queues them on in
// (unless the hook consumes them) until the connection ends.
func (rc *rawClient) start() {
	rc.started = true
	go func() {
		defer close(rc.done)
		for {
			p, err := packet.Decode(rc.br, rc.v, 0)
			if err != nil {
				rc.readErr = err
				return
			}
			if rc.hook != nil && rc.hook(rc, p) {
				continue
			}
			select {
			case rc.in <- p:
			case <-rc.stop:
				rc.readErr = errors.New("stopped")
				return
			}
		}
	}()
}

// write sends raw bytes. Safe for concurrent use; returns the error.
func (rc *rawClient) write(b []byte) error {
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	rc.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := rc.conn.Write(b)
	return err
}

// sendErr encodes and sends p. Safe for concurrent use.
func (rc *rawClient) sendErr(p packet.Packet) error {
	b, err := packet.Append(nil, p, rc.v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", p, err)
	}
	return rc.write(b)
}

// send encodes and sends p; only from the test goroutine.
func (rc *rawClient) send(p packet.Packet) {
	rc.t.Helper()
	if err := rc.sendErr(p); err != nil {
		rc.t.Fatalf("send %T: %v", p, err)
	}
}

// nextErr returns the next queued packet, io.EOF-like errors when the
// connection ended, or a timeout error.
func (rc *rawClient) nextErr(d time.Duration) (packet.Packet, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case p := <-rc.in:
		return p, nil
	case <-rc.done:
		select {
		case p := <-rc.in:
			return p, nil
		default:
		}
		return nil, fmt.Errorf("connection ended: %w", rc.readErr)
	case <-timer.C:
		return nil, fmt.Errorf("no packet within %s", d)
	}
}

func (rc *rawClient) next(d time.Duration) packet.Packet {
	rc.t.Helper()
	p, err := rc.nextErr(d)
	if err != nil {
		rc.t.Fatal(err)
	}
	return p
}

// expect returns the next packet, which must be of type T.
func expect[T packet.Packet](t testing.TB, rc *rawClient, d time.Duration) T {
	t.Helper()
	p := rc.next(d)
	v, ok := p.(T)
	if !ok {
		var zero T
		t.Fatalf("got %T %+v, want %T", p, p, zero)
	}
	return v
}

// closedErr reports whether err means the peer closed the connection.
func closedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// expectClose reads until the broker closes the connection and returns the
// packets that arrived before. It fails on a timeout.
func (rc *rawClient) expectClose(d time.Duration) []packet.Packet {
	rc.t.Helper()
	deadline := time.Now().Add(d)
	var got []packet.Packet
	for {
		p, err := rc.nextErr(time.Until(deadline))
		if err == nil {
			got = append(got, p)
			continue
		}
		select {
		case <-rc.done:
		default:
			rc.t.Fatalf("connection not closed by the broker: %v (got %v)", err, types(got))
		}
		if !closedErr(rc.readErr) {
			rc.t.Fatalf("connection ended with %v, want EOF or reset", rc.readErr)
		}
		return got
	}
}

func types(ps []packet.Packet) []string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%T", p))
	}
	return s
}

// connect sends CONNECT, starts the reader and returns the CONNACK, which
// must be a success.
func (rc *rawClient) connect(cp *packet.Connect) *packet.Connack {
	rc.t.Helper()
	cp.Version = rc.v
	if cp.ProtocolName == "" {
		cp.ProtocolName = "MQTT"
		if rc.v == packet.V31 {
			cp.ProtocolName = "MQIsdp"
		}
	}
	rc.send(cp)
	if !rc.started {
		rc.start()
	}
	ack := expect[*packet.Connack](rc.t, rc, 10*time.Second)
	if ack.ReasonCode != 0 {
		rc.t.Fatalf("connack reason %v", ack.ReasonCode)
	}
	return ack
}

// rawConnect dials and connects a client with the given id and clean flag.
func rawConnect(t testing.TB, addr string, v packet.Version, id string, clean bool, mod func(*packet.Connect)) (*rawClient, *packet.Connack) {
	t.Helper()
	rc := rawDial(t, addr, v)
	cp := &packet.Connect{ClientID: id, CleanStart: clean, KeepAlive: 60}
	if mod != nil {
		mod(cp)
	}
	return rc, rc.connect(cp)
}

// subscribe sends SUBSCRIBE and waits for SUBACK, checking every code is a
// grant (below 0x80).
func (rc *rawClient) subscribe(id uint16, props packet.Properties, subs ...packet.Subscription) {
	rc.t.Helper()
	rc.send(&packet.Subscribe{PacketID: id, Props: props, Subscriptions: subs})
	ack := expect[*packet.Suback](rc.t, rc, 10*time.Second)
	if ack.PacketID != id {
		rc.t.Fatalf("suback id %d, want %d", ack.PacketID, id)
	}
	for i, c := range ack.ReasonCodes {
		if c.IsError() {
			rc.t.Fatalf("subscription %q refused: %v", subs[i].Filter, c)
		}
	}
}

// disconnect sends DISCONNECT and waits for the broker to close.
func (rc *rawClient) disconnect() {
	rc.t.Helper()
	rc.send(&packet.Disconnect{})
	rc.expectClose(10 * time.Second)
}

// nextPublish returns the next packet, which must be a PUBLISH.
func (rc *rawClient) nextPublish(d time.Duration) *packet.Publish {
	rc.t.Helper()
	return expect[*packet.Publish](rc.t, rc, d)
}

// noPacket asserts nothing arrives within d. Use only after a later marker
// message has been arranged, or for short d, never as a way to wait.
func (rc *rawClient) noPacket(d time.Duration) {
	rc.t.Helper()
	if p, err := rc.nextErr(d); err == nil {
		rc.t.Fatalf("unexpected %T %+v", p, p)
	}
}

// ackPublish answers an incoming QoS 1/2 PUBLISH (PUBACK or PUBREC).
func (rc *rawClient) ackPublish(p *packet.Publish) {
	rc.t.Helper()
	switch p.QoS {
	case 1:
		rc.send(&packet.Puback{PacketID: p.PacketID})
	case 2:
		rc.send(&packet.Pubrec{PacketID: p.PacketID})
	}
}

// autoAck is a hook that acknowledges incoming publishes and PUBRELs on the
// reader goroutine and still queues the publishes for the test.
func autoAck(rc *rawClient, p packet.Packet) bool {
	switch p := p.(type) {
	case *packet.Publish:
		switch p.QoS {
		case 1:
			rc.sendErr(&packet.Puback{PacketID: p.PacketID})
		case 2:
			rc.sendErr(&packet.Pubrec{PacketID: p.PacketID})
		}
	case *packet.Pubrel:
		rc.sendErr(&packet.Pubcomp{PacketID: p.PacketID})
		return true
	}
	return false
}

// ackingSubscriber connects a clean session id at level v whose reader
// acknowledges every message it gets (autoAck, set before the reader
// starts; the publishes are still queued for the test), subscribed to subs.
func ackingSubscriber(t testing.TB, addr string, v packet.Version, id string, subs ...packet.Subscription) *rawClient {
	t.Helper()
	rc := rawDial(t, addr, v)
	rc.hook = autoAck
	rc.connect(&packet.Connect{ClientID: id, CleanStart: true, KeepAlive: 60})
	rc.subscribe(1, packet.Properties{}, subs...)
	return rc
}

// stats helpers.
func closes(b *broker, reason string) int64 { return b.srv.Stats().Closes[reason] }
func drops(b *broker, reason string) int64  { return b.srv.Stats().Drops[reason] }
