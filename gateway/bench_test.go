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
func benchClient(tb testing.TB, srv *Server, id string) *client {
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

// commitSink is an asynchronous sink that holds each message's done until
// the benchmark loop plays its group commit, as a bridge's spool does: the
// publisher's acknowledgement is deferred (ack.go).
type commitSink struct{ dones []func(error) }

func (s *commitSink) Accept(*Message) error { return nil }

func (s *commitSink) AcceptAsync(_ *Message, done func(error)) { s.dones = append(s.dones, done) }

func (s *commitSink) commit() {
	for i, done := range s.dones {
		done(nil)
		s.dones[i] = nil
	}
	s.dones = s.dones[:0]
}

// publishRig is a server with subscribers and a publisher whose stream
// step plays one PUBLISH of, from the bytes to the subscribers' encoded
// writes and the publisher's ack.
type publishRig struct {
	qos     byte
	pub     *client
	readers []*client
	sink    commitSink
	ws      *wstate
	wbuf    []byte
}

func newPublishRig(tb testing.TB, subs int, qos byte, acl, bridged bool) *publishRig {
	var opts Options
	if acl {
		p := filepath.Join(tb.TempDir(), "acl")
		if err := os.WriteFile(p, []byte(benchACL), 0o600); err != nil {
			tb.Fatal(err)
		}
		files := &auth.Files{ACLFile: p}
		if err := files.Load(); err != nil {
			tb.Fatal(err)
		}
		opts.Authorizer = files
	}
	srv := New(opts, nil)
	r := &publishRig{qos: qos, readers: make([]*client, subs), ws: getWstate(), wbuf: make([]byte, 0, maxBatch)}
	for i := range r.readers {
		c := benchClient(tb, srv, fmt.Sprintf("sub%d", i))
		sub := subscription{sess: c.sess, qos: qos}
		c.sess.subscribe(c, "sensors/+/temp", "sensors/+/temp", sub)
		r.readers[i] = c
	}
	if bridged {
		if err := srv.AddSink("cloud", "sensors/#", &r.sink); err != nil {
			tb.Fatal(err)
		}
	}
	r.pub = benchClient(tb, srv, "pub")

	// 64 publishes of a 64-byte payload, as a client sends them.
	var stream []byte
	for i := range 64 {
		p := &packet.Publish{QoS: qos, Topic: "sensors/dev42/temp", Payload: make([]byte, 64)}
		if qos > 0 {
			p.PacketID = uint16(i + 1)
		}
		stream, _ = packet.Append(stream, p, packet.V311)
	}
	r.pub.rs = &rstate{br: bufio.NewReaderSize(&loopReader{b: stream}, readBufSize)}
	return r
}

// step routes one PUBLISH and plays everyone else's part: the sink's
// commit, the subscribers' writers and acks, the publisher's writer.
func (r *publishRig) step(tb testing.TB) {
	pk, err := r.pub.decodeNext(0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.pub.handle(pk); err != nil {
		tb.Fatal(err)
	}
	r.sink.commit()
	ws := r.ws
	for _, c := range r.readers {
		var rel []*keep
		ws.out, rel, _ = c.sess.takeSendable(c, c.window, time.Now(), maxBatch, ws.out[:0])
		releaseWaiters(rel)
		r.wbuf = r.wbuf[:0]
		for j := range ws.out {
			r.wbuf = c.appendOutgoing(ws, r.wbuf, &ws.out[j])
		}
		clear(ws.out)
		if r.qos > 0 { // the subscriber acknowledges at once
			for id := range c.sess.inflight {
				c.sess.ackPuback(c, id)
			}
		}
	}
	if r.qos > 0 { // the publisher's acks, as its writer would send them
		pub := r.pub
		pub.wmu.Lock()
		r.wbuf = r.wbuf[:0]
		for j := range pub.ctrl {
			r.wbuf, _ = pub.appendCtrl(ws, r.wbuf, &pub.ctrl[j])
		}
		clear(pub.ctrl)
		pub.ctrl = pub.ctrl[:0]
		pub.wmu.Unlock()
	}
}

func benchPublishPath(b *testing.B, subs int, qos byte, acl, bridged bool) {
	r := newPublishRig(b, subs, qos, acl, bridged)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.step(b)
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
					benchPublishPath(b, subs, qos, acl, false)
				})
			}
		}
	}
}

// BenchmarkPublishPathBridged is the sensor fleet's path: a QoS 1 reading
// to one local subscriber and to a bridge's spool, whose group commit
// releases the publisher's PUBACK.
func BenchmarkPublishPathBridged(b *testing.B) {
	benchPublishPath(b, 1, 1, false, true)
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

// A QoS 1 reading bridged upstream (its PUBACK deferred to the spool's
// group commit) and delivered to one local subscriber costs six
// allocations: the message and its payload, the subscriber's in-flight
// record, the publisher's ack queue, the sink's done, and the ack slot
// with its keep in one (ack.go). At a sensor fleet's rate the garbage of
// each reading is what sets how often the GC runs; a change
// that adds to it fails here, and says which count it was.
func TestBridgedPublishAllocations(t *testing.T) {
	const want = 6
	r := newPublishRig(t, 1, 1, false, true)
	r.step(t) // the first step grows buffers that later ones reuse
	if got := testing.AllocsPerRun(200, func() { r.step(t) }); got > want {
		t.Fatalf("a bridged QoS 1 publish allocates %.1f objects, want at most %d (go test -bench PublishPathBridged -benchmem ./gateway/)", got, want)
	}
}
