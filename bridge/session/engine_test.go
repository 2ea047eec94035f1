package session_test

import (
	"bufio"
	"context"
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
		up := startBroker(t, "max_queued_messages 100000\n")
		s := subscribe(t, up.addr, "up/#")
		px := startProxy(t, up.addr)
		store := session.NewMemStore()
		e, err := session.New(config(v), store)
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.addr())
		s.ready(t, l, "up/probe")
		var cuts, resumed int
		for rec := uint64(1); rec <= n; rec++ {
			if rec%100 == 50 {
				px.cut() // flows of the last window are in flight
				cuts++
			}
			for {
				if _, err := l.Publish(context.Background(), rec, msg(rec)); err == nil {
					break
				}
				<-l.Done()
				l.Close(false)
				l = connect(t, e, px.addr())
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
		up := startBroker(t, "")
		px := startProxy(t, up.addr)
		store := session.NewMemStore()
		e, err := session.New(config(v), store)
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.addr())
		px.freeze() // nothing reaches the broker: every flow stays in flight
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
		px.thaw()
		px.cut()
		<-l.Done()
		l.Close(false)
		s := subscribe(t, up.addr, "up/#")
		l = connect(t, e, px.addr())
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
		up := startBroker(t, "")
		px := startProxy(t, up.addr)
		cfg := config(v)
		cfg.KeepAlive = 2 * time.Second
		e, err := session.New(cfg, session.NewMemStore())
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.addr())
		px.freeze()
		testutil.Eventually(t, cfg.KeepAlive*3/2+time.Second, "silent peer found", func() bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		})
		if err := l.Err(); !errors.Is(err, session.ErrKeepalive) {
			t.Fatalf("link ended with %v, want the keepalive", err)
		}
	})
}

// TestStuckWriteFoundWithinWriteTimeout: a peer that stops reading (a
// frozen proxy) fills the socket's buffers; the write that then makes no
// progress ends the link within write_timeout, long before the keepalive
// or the watchdog could (field report 003).
func TestStuckWriteFoundWithinWriteTimeout(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		up := startBroker(t, "")
		px := startProxy(t, up.addr)
		cfg := config(v)
		cfg.KeepAlive, cfg.AckTimeout, cfg.WriteTimeout = 60*time.Second, 60*time.Second, time.Second
		e, err := session.New(cfg, session.NewMemStore())
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.addr())
		px.freeze()
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
		if err := l.Err(); !errors.Is(err, wire.ErrWriteTimeout) {
			t.Fatalf("link ended with %v, want a write timeout", err)
		}
	})
}

// TestAckWatchdog: publishes that are never answered, on a connection
// from which nothing at all is read, end the link after ack_timeout
// (keepalive far away).
func TestAckWatchdog(t *testing.T) {
	versions(t, func(t *testing.T, v packet.Version) {
		up := startBroker(t, "")
		px := startProxy(t, up.addr)
		cfg := config(v)
		cfg.KeepAlive, cfg.AckTimeout = 60*time.Second, time.Second
		e, err := session.New(cfg, session.NewMemStore())
		if err != nil {
			t.Fatal(err)
		}
		l := connect(t, e, px.addr())
		px.freeze()
		if _, err := l.Publish(context.Background(), 1, msg(1)); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, cfg.AckTimeout+2*time.Second, "watchdog trip", func() bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		})
		if err := l.Err(); !errors.Is(err, session.ErrWatchdog) {
			t.Fatalf("link ended with %v, want the watchdog", err)
		}
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
