package session_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

// broker is a Debian mosquitto for one test.
type broker struct {
	*testutil.Mosquitto
	addr string
}

// startBroker starts mosquitto with its default configuration (one
// listener, anonymous access; max_inflight_messages 20, max_queued_messages
// 1000, no persistence) plus extra lines (tuning).
func startBroker(t *testing.T, extra string) *broker {
	t.Helper()
	port := testutil.FreePort(t)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", port) + extra
	if os.Getenv("EDGEGW_TEST_DEBUG") == "" {
		conf += "log_dest none\n"
	}
	return &broker{Mosquitto: testutil.StartMosquitto(t, conf, port), addr: "127.0.0.1:" + strconv.Itoa(port)}
}

// sub is a mosquitto_sub subscribed at QoS 2, counting payloads.
type sub struct {
	mu   sync.Mutex
	seen map[string]int
	n    int
}

func subscribe(t *testing.T, addr, filter string) *sub {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-t", filter, "-q", "2", "-v", "-i", "engine-sub-"+strconv.Itoa(os.Getpid()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("mosquitto_sub (mosquitto-clients, scripts/install-test-deps.sh): %v", err)
	}
	s := &sub{seen: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, payload, _ := strings.Cut(sc.Text(), " ")
			s.mu.Lock()
			s.seen[payload]++
			s.n++
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-done; cmd.Wait() })
	return s
}

func (s *sub) has(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[p] > 0
}

func (s *sub) count(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[p]
}

// ready publishes probes through c until s sees one: the subscription is
// in place.
func (s *sub) ready(t *testing.T, l *session.Link, topic string) {
	t.Helper()
	i := 0
	testutil.Eventually(t, 10*time.Second, "subscriber ready", func() bool {
		i++
		l.Publish(context.Background(), 0, &packet.Publish{Topic: topic, Payload: []byte("probe" + strconv.Itoa(i))})
		time.Sleep(10 * time.Millisecond) // between probes, not a wait for an event
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.n > 0
	})
}

func config(v packet.Version) session.Config {
	return session.Config{
		ClientID: "engine-" + strconv.Itoa(int(v)), Version: v, BridgeFlag: v != packet.V5,
		KeepAlive: 30 * time.Second, WriteTimeout: 5 * time.Second, AckTimeout: 20 * time.Second,
		ConnectTimeout: 5 * time.Second, MaxInflightQoS2: 20,
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

func connect(t *testing.T, e *session.Engine, addr string) *session.Link {
	t.Helper()
	l, err := e.Connect(context.Background(), dial(t, addr))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { l.Close(false) })
	return l
}

// proxied is an engine connected to a mosquitto through a proxy.
type proxied struct {
	up    *broker
	px    *testutil.Proxy
	store *session.MemStore
	e     *session.Engine
	l     *session.Link
}

// startProxied starts a mosquitto (extra: its tuning) and a proxy in
// front of it, and connects a new engine with cfg through the proxy.
func startProxied(t *testing.T, cfg session.Config, extra string) *proxied {
	t.Helper()
	r := &proxied{up: startBroker(t, extra), store: session.NewMemStore()}
	r.px = testutil.StartProxy(t, r.up.addr)
	var err error
	if r.e, err = session.New(cfg, r.store); err != nil {
		t.Fatal(err)
	}
	r.l = connect(t, r.e, r.px.Addr())
	return r
}

// linkEnds waits (within) for link l to end, with an error that is want.
func linkEnds(t *testing.T, l *session.Link, within time.Duration, want error) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("the link is still up after %s, want it ended by %v", within, want)
	}
	if err := l.Err(); !errors.Is(err, want) {
		t.Fatalf("link ended with %v, want %v", err, want)
	}
}

// msg is record rec's message: QoS 1 for odd records, 2 for even ones.
func msg(rec uint64) *packet.Publish {
	return &packet.Publish{Topic: "up/t", QoS: byte(2 - rec%2), Payload: []byte("m" + strconv.FormatUint(rec, 10))}
}

func versions(t *testing.T, f func(t *testing.T, v packet.Version)) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run("v"+v.String(), func(t *testing.T) { f(t, v) })
	}
}

// TestFlowsIntoMosquitto: QoS 1 and 2 publishes, mixed, into a default
// and a tuned mosquitto, over both protocols: each is acknowledged
// (its record acked in the store only then) and arrives, the QoS 2 ones
// exactly once. The tuned broker takes 5 flows at a time (MQTT 5: its
// Receive Maximum says so; 3.1.1: max_inflight_qos2 is set to match).
func TestFlowsIntoMosquitto(t *testing.T) {
	for _, c := range []struct {
		name  string
		conf  string
		quota int
	}{
		{"default", "", 20},
		{"tuned", "max_inflight_messages 5\nmax_queued_messages 100000\n", 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			versions(t, func(t *testing.T, v packet.Version) {
				const n = 600
				up := startBroker(t, c.conf)
				s := subscribe(t, up.addr, "up/#")
				store := session.NewMemStore()
				cfg := config(v)
				cfg.MaxInflightQoS2 = c.quota
				e, err := session.New(cfg, store)
				if err != nil {
					t.Fatal(err)
				}
				l := connect(t, e, up.addr)
				s.ready(t, l, "up/probe")
				for rec := uint64(1); rec <= n; rec++ {
					if _, err := l.Publish(context.Background(), rec, msg(rec)); err != nil {
						t.Fatalf("publish %d: %v", rec, err)
					}
				}
				testutil.Eventually(t, 30*time.Second, "every record acked", func() bool { return len(store.Acked()) == n })
				testutil.Eventually(t, 30*time.Second, "every message received", func() bool { return s.has("m"+strconv.Itoa(n)) && s.has("m"+strconv.Itoa(n-1)) })
				for rec := 1; rec <= n; rec++ {
					got := s.count("m" + strconv.Itoa(rec))
					if got == 0 || (rec%2 == 0 && got != 1) {
						t.Errorf("record %d (QoS %d) received %d times", rec, 2-rec%2, got)
					}
				}
				if c, _ := e.InFlight(); c != 0 {
					t.Errorf("%d flows still in flight", c)
				}
			})
		})
	}
}

// TestResumeWithSessionPresent: the connection is cut while QoS 1/2
// flows are in flight; the next connection finds the session present and
// re-sends them under their ids first (PUBLISH with DUP, or PUBREL), and
// every QoS 2 message arrives exactly once.
func TestResumeWithSessionPresent(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		const n = 400
		r := startProxied(t, config(v), "max_queued_messages 100000\n")
		s := subscribe(t, r.up.addr, "up/#")
		e, l, store := r.e, r.l, r.store
		s.ready(t, l, "up/probe")
		var cuts, resumed int
		for rec := uint64(1); rec <= n; rec++ {
			if rec%100 == 50 {
				r.px.Cut() // flows of the last window are in flight
				cuts++
			}
			for {
				if _, err := l.Publish(context.Background(), rec, msg(rec)); err == nil {
					break
				}
				<-l.Done()
				l.Close(false)
				l = connect(t, e, r.px.Addr())
				if !l.SessionPresent {
					t.Fatal("session not present after a cut")
				}
				resumed += len(l.Resumed())
			}
		}
		testutil.Eventually(t, 30*time.Second, "every record acked", func() bool { return len(store.Acked()) == n })
		testutil.Eventually(t, 30*time.Second, "the last messages received", func() bool { return s.has("m"+strconv.Itoa(n)) && s.has("m"+strconv.Itoa(n-1)) })
		for rec := 2; rec <= n; rec += 2 {
			if got := s.count("m" + strconv.Itoa(rec)); got != 1 {
				t.Errorf("QoS 2 record %d received %d times", rec, got)
			}
		}
		for rec := 1; rec <= n; rec += 2 {
			if s.count("m"+strconv.Itoa(rec)) == 0 {
				t.Errorf("QoS 1 record %d lost", rec)
			}
		}
		t.Logf("%d cuts, %d flows resumed", cuts, resumed)
		if resumed == 0 {
			t.Error("no flow was in flight at a cut: the test tested nothing")
		}
	})
}

// TestSessionPresentZeroResetsFlows: a broker restarted without
// persistence has no session; the flows in flight are reset (not
// acknowledged: their records stay) and go again as new messages.
func TestSessionPresentZeroResetsFlows(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		r := startProxied(t, config(v), "")
		up, px, store, e, l := r.up, r.px, r.store, r.e, r.l
		px.Freeze() // nothing reaches the broker: every flow stays in flight
		var flows []*session.Flow
		for rec := uint64(1); rec <= 10; rec++ {
			f, err := l.Publish(context.Background(), rec, msg(rec))
			if err != nil {
				t.Fatal(err)
			}
			flows = append(flows, f)
		}
		up.Kill()
		up.Start()
		px.Thaw()
		px.Cut()
		<-l.Done()
		l.Close(false)
		s := subscribe(t, up.addr, "up/#")
		l = connect(t, e, px.Addr())
		if l.SessionPresent {
			t.Fatal("session present on a restarted broker without persistence")
		}
		if l.LostFlows() != 10 {
			t.Errorf("%d flows reset, want 10", l.LostFlows())
		}
		for _, f := range flows {
			select {
			case <-f.Done():
			default:
				t.Fatalf("flow of record %d not ended", f.Rec)
			}
			if _, reset := f.Result(); !reset {
				t.Errorf("flow of record %d ended, not reset", f.Rec)
			}
		}
		if a := store.Acked(); len(a) != 0 {
			t.Fatalf("records %v acked without an ack", a)
		}
		s.ready(t, l, "up/probe")
		for rec := uint64(1); rec <= 10; rec++ { // as new messages
			if _, err := l.Publish(context.Background(), rec, msg(rec)); err != nil {
				t.Fatal(err)
			}
		}
		testutil.Eventually(t, 10*time.Second, "every record acked", func() bool { return len(store.Acked()) == 10 })
		testutil.Eventually(t, 10*time.Second, "every message received", func() bool {
			for rec := 1; rec <= 10; rec++ {
				if !s.has("m" + strconv.Itoa(rec)) {
					return false
				}
			}
			return true
		})
	})
}

// TestSilentPeerFoundByKeepalive: a peer that stops answering (a proxy
// that forwards nothing, the TCP connection up) is found within 1.5 times
// the keepalive of the last packet read.
func TestSilentPeerFoundByKeepalive(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		cfg := config(v)
		cfg.KeepAlive = 2 * time.Second
		r := startProxied(t, cfg, "")
		r.px.Freeze()
		linkEnds(t, r.l, cfg.KeepAlive*3/2+time.Second, session.ErrKeepalive)
	})
}

// TestStuckWriteFoundWithinWriteTimeout: a peer that stops reading (a
// frozen proxy) fills the socket's buffers; the write that then makes no
// progress ends the link within write_timeout, long before the keepalive
// or the watchdog could (field report 003).
func TestStuckWriteFoundWithinWriteTimeout(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		cfg := config(v)
		cfg.KeepAlive, cfg.AckTimeout, cfg.WriteTimeout = 60*time.Second, 60*time.Second, time.Second
		r := startProxied(t, cfg, "")
		l := r.l
		r.px.Freeze()
		payload := make([]byte, 256<<10)
		var stuck time.Time
		for i := 0; ; i++ {
			start := time.Now()
			_, err := l.Publish(context.Background(), 0, &packet.Publish{Topic: "up/big", Payload: payload})
			if err != nil {
				break
			}
			if time.Since(start) > 100*time.Millisecond && stuck.IsZero() {
				stuck = start // Send waited: the writer is stuck
			}
			if i > 10000 {
				t.Fatal("200 MB written into a frozen proxy")
			}
		}
		linkEnds(t, l, cfg.WriteTimeout, wire.ErrWriteTimeout)
	})
}

// TestAckWatchdog: publishes that are never answered, on a connection
// from which nothing at all is read, end the link after ack_timeout
// (keepalive far away).
func TestAckWatchdog(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		cfg := config(v)
		cfg.KeepAlive, cfg.AckTimeout = 60*time.Second, time.Second
		r := startProxied(t, cfg, "")
		r.px.Freeze()
		if _, err := r.l.Publish(context.Background(), 1, msg(1)); err != nil {
			t.Fatal(err)
		}
		linkEnds(t, r.l, cfg.AckTimeout+2*time.Second, session.ErrWatchdog)
	})
}

// TestAckWatchdogBehindAnOlderFlow: the oldest unfinished flow is a QoS 2
// one whose PUBREC came (its PUBCOMP is lost), and the link was alive
// after it (a later QoS 1 was acknowledged). The link then goes silent
// with a new publish unanswered: the watchdog ends it after ack_timeout,
// judged by that publish, not by the old flow read past long ago.
func TestAckWatchdogBehindAnOlderFlow(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		cfg := config(v)
		cfg.KeepAlive, cfg.AckTimeout = 60*time.Second, time.Second
		r := startProxied(t, cfg, "")
		comps := make(chan struct{}, 1)
		r.px.Filter(testutil.Down, func(pkt []byte) testutil.Verdict {
			if pkt[0]>>4 == 7 { // PUBCOMP: lost, after its PUBREL went out
				select {
				case comps <- struct{}{}:
				default:
				}
				return testutil.Drop
			}
			return testutil.Pass
		})
		r.px.Cut() // the filter reads connections made from now on
		r.l = connect(t, r.e, r.px.Addr())
		if _, err := r.l.Publish(context.Background(), 2, msg(2)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-comps:
		case <-time.After(10 * time.Second):
			t.Fatal("no PUBCOMP from upstream")
		}
		f, err := r.l.Publish(context.Background(), 3, msg(3))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.Done(): // read after the QoS 2 flow's PUBREL
		case <-time.After(10 * time.Second):
			t.Fatal("no PUBACK for the QoS 1 publish")
		}
		r.px.Freeze()
		if _, err := r.l.Publish(context.Background(), 5, msg(5)); err != nil {
			t.Fatal(err)
		}
		linkEnds(t, r.l, cfg.AckTimeout+2*time.Second, session.ErrWatchdog)
	})
}

// gatewayBroker is the gateway's own broker on a TCP listener: unlike
// Debian's mosquitto 2.0.11, which closes the socket of a connection
// another one took over, it sends an MQTT 5 client DISCONNECT 0x8E first.
func gatewayBroker(t *testing.T) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := gateway.New(gateway.Options{AllowAnonymous: true}, log)
	ln := &listeners.TCP{Name: "test", Address: "127.0.0.1:0", Log: log}
	if err := ln.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); ln.Serve(ctx, srv.ServeConn) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ln.Addr().String()
}

// TestServerDisconnectSaysItsReason: over MQTT 5, a second connection
// with the link's client id makes the broker end the first with
// DISCONNECT 0x8E session taken over [MQTT-3.1.4-3]; the first link's
// error is a DisconnectError with that code (the bridge names a client id
// collision by it), and is ErrServerDisconnect.
func TestServerDisconnectSaysItsReason(t *testing.T) {
	addr := gatewayBroker(t)
	cfg := config(packet.V5)
	e1, err := session.New(cfg, session.NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	e2, err := session.New(cfg, session.NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	l1 := connect(t, e1, addr)
	connect(t, e2, addr)
	select {
	case <-l1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first link is still up after a second connection took its client id")
	}
	err = l1.Err()
	var de *session.DisconnectError
	if !errors.As(err, &de) || de.Code != 0x8E {
		t.Fatalf("link ended with %v, want DISCONNECT 0x8e", err)
	}
	if !errors.Is(err, session.ErrServerDisconnect) {
		t.Errorf("%v is not ErrServerDisconnect", err)
	}
}

// packetID returns the packet id of pkt, a whole MQTT packet, and whether
// it has one that starts a flow or a request: a QoS 1/2 PUBLISH not
// marked DUP, a SUBSCRIBE, an UNSUBSCRIBE. answers reports the id of a
// PUBACK, PUBCOMP, SUBACK or UNSUBACK: the end of one.
func packetID(pkt []byte) (id uint16, starts, answers bool) {
	body := pkt[1:]
	for body[0]&0x80 != 0 { // the remaining length
		body = body[1:]
	}
	body = body[1:]
	switch typ := pkt[0] >> 4; {
	case typ == 3 && pkt[0]&0x06 != 0:
		tl := int(binary.BigEndian.Uint16(body))
		return binary.BigEndian.Uint16(body[2+tl:]), pkt[0]&0x08 == 0, false
	case typ == 8 || typ == 10:
		return binary.BigEndian.Uint16(body), true, false
	case typ == 4 || typ == 7 || typ == 9 || typ == 11:
		return binary.BigEndian.Uint16(body), false, true
	}
	return 0, false, false
}

// idWatch reads the packet ids on the wire: every id a new publish or
// request takes must be other than 0 and free, not held by a flow or
// request the engine was not yet answered. While holding, it holds the
// answers back at the proxy; they end their flows when the test lets
// them go (release).
type idWatch struct {
	px       *testutil.Proxy
	mu       sync.Mutex
	inFlight map[uint16]string // id: the packet that took it
	held     []uint16          // answered at the proxy, held back
	holding  bool
	subID    uint16 // the SUBSCRIBE's id
	subSeen  bool
	bad      []string
}

func watchIDs(px *testutil.Proxy) *idWatch {
	w := &idWatch{px: px, inFlight: map[uint16]string{}, holding: true}
	px.Filter(testutil.Up, func(pkt []byte) testutil.Verdict {
		id, starts, _ := packetID(pkt)
		if !starts {
			return testutil.Pass
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		what := fmt.Sprintf("packet type %d ending %q", pkt[0]>>4, pkt[max(0, len(pkt)-8):])
		if id == 0 || w.inFlight[id] != "" {
			w.bad = append(w.bad, fmt.Sprintf("%s took id %d, held by %q", what, id, w.inFlight[id]))
		}
		w.inFlight[id] = what
		if pkt[0]>>4 == 8 {
			w.subID, w.subSeen = id, true
		}
		return testutil.Pass
	})
	px.Filter(testutil.Down, func(pkt []byte) testutil.Verdict {
		id, _, answers := packetID(pkt)
		if !answers {
			return testutil.Pass
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.holding {
			w.held = append(w.held, id)
			return testutil.Hold
		}
		delete(w.inFlight, id)
		return testutil.Pass
	})
	return w
}

// release lets the held answers go, and every later one.
func (w *idWatch) release() {
	w.mu.Lock()
	for _, id := range w.held {
		delete(w.inFlight, id)
	}
	w.held, w.holding = nil, false
	w.mu.Unlock()
	w.px.Allow(testutil.Down, -1)
}

// sub returns the SUBSCRIBE's id, and whether it was seen.
func (w *idWatch) sub() (uint16, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.subID, w.subSeen
}

// TestPacketIDsWrap: packet ids go round past 65535 to 1, never 0, and
// never to an id still in flight. A record's id repeats every 65,535
// records; a QoS 1 record whose id is held (by a flow or a pending
// SUBSCRIBE) takes the next free one, a QoS 2 record waits for its own;
// the look for a free id wraps past 65535 to 1 too. With every answer held
// back at the proxy, records 65533 to 65535 take their own ids, a
// SUBSCRIBE (the look starting at 65533) takes 1, records 131071 and 65537
// (ids 1 and 2, taken) take 2 and 3, and the QoS 2 records 65536 and 65538
// wait for 1 and 3; once the answers go, every message arrives exactly
// once.
func TestPacketIDsWrap(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		up := startBroker(t, "")
		s := subscribe(t, up.addr, "up/#")
		px := testutil.StartProxy(t, up.addr)
		w := watchIDs(px)
		store := session.NewMemStore()
		e, err := session.New(config(v), store)
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.Addr())
		s.ready(t, l, "up/probe")
		session.SetNextID(e, 65533)

		type want struct {
			rec uint64
			qos byte
			id  uint16
		}
		pub := func(w want) *session.Flow {
			t.Helper()
			f, err := l.Publish(context.Background(), w.rec, &packet.Publish{Topic: "up/t", QoS: w.qos, Payload: []byte("m" + strconv.FormatUint(w.rec, 10))})
			if err != nil {
				t.Fatalf("publish %d: %v", w.rec, err)
			}
			if f.ID != w.id {
				t.Errorf("record %d (QoS %d) went under id %d, want %d", w.rec, w.qos, f.ID, w.id)
			}
			return f
		}
		var flows []*session.Flow
		for _, w := range []want{{65533, 1, 65533}, {65534, 2, 65534}, {65535, 1, 65535}} {
			flows = append(flows, pub(w))
		}
		subscribed := make(chan error, 1)
		go func() {
			_, err := l.Subscribe(context.Background(), []packet.Subscription{{Filter: "down/wrap", QoS: 1}})
			subscribed <- err
		}()
		testutil.Eventually(t, 10*time.Second, "the SUBSCRIBE on the wire", func() bool { _, seen := w.sub(); return seen })
		if id, _ := w.sub(); id != 1 {
			t.Errorf("the SUBSCRIBE went under id %d, want 1 (65534 and 65535 taken, 0 never)", id)
		}
		waiting := []want{{65536, 2, 1}, {65538, 2, 3}} // their ids are taken
		waited := make(chan *session.Flow, len(waiting))
		go func() { waited <- pub(waiting[0]) }()
		for _, w := range []want{{131071, 1, 2}, {65537, 1, 3}} {
			flows = append(flows, pub(w))
		}
		go func() { waited <- pub(waiting[1]) }()
		flows = append(flows, pub(want{65539, 1, 4}))
		var recs []uint64
		for _, f := range e.Pending() {
			recs = append(recs, f.Rec)
		}
		if fmt.Sprint(recs) != "[65533 65534 65535 65537 65539 131071]" {
			t.Errorf("flows in flight %v: the QoS 2 records 65536 and 65538 must wait for their ids", recs)
		}

		w.release()
		if err := <-subscribed; err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		for range waiting {
			select {
			case f := <-waited:
				flows = append(flows, f)
			case <-time.After(10 * time.Second):
				t.Fatal("a QoS 2 record still waits for its id after every answer came")
			}
		}
		for _, f := range flows {
			select {
			case <-f.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the flow of record %d (id %d) did not end", f.Rec, f.ID)
			}
		}
		testutil.Eventually(t, 10*time.Second, "every message received", func() bool {
			for _, f := range flows {
				if !s.has("m" + strconv.FormatUint(f.Rec, 10)) {
					return false
				}
			}
			return true
		})
		for _, f := range flows {
			if n := s.count("m" + strconv.FormatUint(f.Rec, 10)); n != 1 {
				t.Errorf("record %d (QoS %d, id %d) received %d times", f.Rec, f.QoS, f.ID, n)
			}
		}
		if got := len(store.Acked()); got != 8 {
			t.Errorf("%d records acked, want 8", got)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, b := range w.bad {
			t.Error(b)
		}
	})
}
