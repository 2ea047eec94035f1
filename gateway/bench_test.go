package gateway

// Micro-benchmarks of the hot path: a PUBLISH arrives as bytes, is decoded
// by the reader's code, routed through the topic tree into the subscribers'
// sessions, and encoded by the writer's code into its batch buffer. The
// subscriber connections have no writer goroutine here (writing is set, so
// kick only marks work); the benchmark loop plays their writer, so the
// figures are CPU and allocations per message, free of scheduling noise.
//
//	go test -run '^$' -bench PublishPath -benchmem ./gateway/

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
)

// nopConn is a net.Conn that discards writes and never has anything to read.
type nopConn struct{}

func (nopConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (nopConn) Write(b []byte) (int, error)      { return len(b), nil }
func (nopConn) Close() error                     { return nil }
func (nopConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (nopConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (nopConn) SetDeadline(time.Time) error      { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }

// loopReader replays one byte stream forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// benchClient connects a client to srv as the reader's CONNECT handling
// would, without a network and without a writer goroutine.
func benchClient(b *testing.B, srv *Server, id string) *client {
	c := newClient(srv, nopConn{}, "bench", "")
	c.version = packet.V311
	c.id = id
	c.window = srv.opts.MaxInflight
	c.sess = srv.reg.attach(c, id, true, 0).sess
	c.ready = true
	c.writing = true // the benchmark is the writer
	return c
}

// benchACL is the rule set of the acl=on runs: the anonymous bench clients
// may read and write sensors/#, except a denied subtree, as a gateway with
// an ACL file has.
const benchACL = `topic readwrite sensors/#
topic deny sensors/secret/#
pattern readwrite clients/%c/#
`

func benchPublishPath(b *testing.B, subs int, qos byte, acl bool) {
	var opts Options
	if acl {
		p := filepath.Join(b.TempDir(), "acl")
		if err := os.WriteFile(p, []byte(benchACL), 0o600); err != nil {
			b.Fatal(err)
		}
		files := &auth.Files{ACLFile: p}
		if err := files.Load(); err != nil {
			b.Fatal(err)
		}
		opts.Authorizer = files
	}
	srv := New(opts, nil)
	readers := make([]*client, subs)
	for i := range readers {
		c := benchClient(b, srv, fmt.Sprintf("sub%d", i))
		sub := subscription{sess: c.sess, qos: qos}
		c.sess.subscribe(c, "sensors/+/temp", "sensors/+/temp", sub)
		readers[i] = c
	}
	pub := benchClient(b, srv, "pub")

	// 64 publishes of a 64-byte payload, as a client sends them.
	var stream []byte
	for i := range 64 {
		p := &packet.Publish{QoS: qos, Topic: "sensors/dev42/temp", Payload: make([]byte, 64)}
		if qos > 0 {
			p.PacketID = uint16(i + 1)
		}
		stream, _ = packet.Append(stream, p, packet.V311)
	}
	pub.rs = &rstate{br: bufio.NewReaderSize(&loopReader{b: stream}, readBufSize)}
	ws := getWstate()
	wbuf := make([]byte, 0, maxBatch)

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pk, err := pub.decodeNext(0)
		if err != nil {
			b.Fatal(err)
		}
		if err := pub.handle(pk); err != nil {
			b.Fatal(err)
		}
		// The subscribers' writers: take what is sendable, encode it.
		for _, c := range readers {
			var rel []*keep
			ws.out, rel, _ = c.sess.takeSendable(c, c.window, time.Now(), maxBatch, ws.out[:0])
			releaseWaiters(rel)
			wbuf = wbuf[:0]
			for j := range ws.out {
				wbuf = c.appendOutgoing(ws, wbuf, &ws.out[j])
			}
			clear(ws.out)
			if qos > 0 { // the subscriber acknowledges at once
				for id := range c.sess.inflight {
					c.sess.ackPuback(c, id)
				}
			}
		}
		if qos > 0 { // the publisher's acks, as its writer would send them
			pub.wmu.Lock()
			wbuf = wbuf[:0]
			for j := range pub.ctrl {
				wbuf, _ = pub.appendCtrl(ws, wbuf, &pub.ctrl[j])
			}
			clear(pub.ctrl)
			pub.ctrl = pub.ctrl[:0]
			pub.wmu.Unlock()
		}
	}
}

func BenchmarkPublishPath(b *testing.B) {
	for _, acl := range []bool{false, true} {
		for _, subs := range []int{1, 50} {
			for _, qos := range []byte{0, 1} {
				name := fmt.Sprintf("subs=%d/qos=%d", subs, qos)
				if acl {
					name += "/acl"
				}
				b.Run(name, func(b *testing.B) {
					benchPublishPath(b, subs, qos, acl)
				})
			}
		}
	}
}

// BenchmarkMayRead is the per-delivery authorization check with its verdict
// cached: what each subscriber of a message costs on top of delivery when
// an ACL is configured.
func BenchmarkMayRead(b *testing.B) {
	p := filepath.Join(b.TempDir(), "acl")
	if err := os.WriteFile(p, []byte(benchACL), 0o600); err != nil {
		b.Fatal(err)
	}
	files := &auth.Files{ACLFile: p}
	if err := files.Load(); err != nil {
		b.Fatal(err)
	}
	s := newSession(nil, "sub0")
	b.Run("hit", func(b *testing.B) {
		s.mayRead(files, "sensors/dev42/temp")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			s.mayRead(files, "sensors/dev42/temp")
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			files.CanRead("", "sub0", "sensors/dev42/temp")
		}
	})
}
