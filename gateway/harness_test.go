package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// broker is a gateway.Server on a real 127.0.0.1 TCP listener.
type broker struct {
	srv  *gateway.Server
	addr string
	stop func() // stops the broker and waits for it; idempotent
}

// startBroker runs a broker for the length of the test and stops it (and
// waits for every goroutine) in cleanup.
func startBroker(t testing.TB, opts gateway.Options) *broker {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("EDGEGW_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return startBrokerLog(t, opts, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// startBrokerLog is startBroker with the caller's logger (tests of what is
// logged).
func startBrokerLog(t testing.TB, opts gateway.Options, log *slog.Logger) *broker {
	t.Helper()
	srv := gateway.New(opts, log)
	l := &listeners.TCP{Name: "test", Address: "127.0.0.1:0", Log: log}
	if err := l.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); l.Serve(ctx, srv.ServeConn) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return &broker{srv: srv, addr: l.Addr().String(), stop: stop}
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cutProxy forwards TCP between clients and a broker. Once cut, what the
// client sends is read and kept (not forwarded), as a link that lost its
// upstream direction; drop then closes every forwarded connection.
type cutProxy struct {
	l    net.Listener
	to   string
	mu   sync.Mutex
	cut  bool
	kept bytes.Buffer // client bytes swallowed while cut
	open []net.Conn
	wg   sync.WaitGroup
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
		go func() {
			defer p.wg.Done()
			defer u.Close()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.mu.Lock()
					cut := p.cut
					if cut {
						p.kept.Write(buf[:n])
					}
					p.mu.Unlock()
					if !cut {
						if _, err := u.Write(buf[:n]); err != nil {
							return
						}
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *cutProxy) setCut(v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = v
}

func (p *cutProxy) swallowed() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.kept.Bytes())
}

func (p *cutProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

// publishN publishes n QoS 1 messages "0".."n-1" to topic from a fresh
// client and waits for every PUBACK.
func publishN(t *testing.T, b *broker, topic string, n int) {
	t.Helper()
	p, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	for i := range n {
		p.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: topic, Payload: []byte(fmt.Sprint(i))})
		if a := expect[*packet.Puback](t, p, 10*time.Second); a.PacketID != uint16(i+1) {
			t.Fatalf("puback %d, want %d", a.PacketID, i+1)
		}
	}
	p.disconnect()
}

// receiveN reads n publishes, acks them and checks payloads "0".."n-1".
func receiveN(t *testing.T, rc *rawClient, n int, wantDup bool) {
	t.Helper()
	for i := range n {
		p := rc.nextPublish(10 * time.Second)
		if string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: payload %q", i, p.Payload)
		}
		if p.Dup != wantDup {
			t.Fatalf("message %d: dup %v, want %v", i, p.Dup, wantDup)
		}
		rc.ackPublish(p)
	}
}

func sessions(b *broker) (connected, disconnected int) {
	st := b.srv.Stats()
	return st.SessionsConnected, st.SessionsDisconnected
}

// waitOneOffline waits until exactly one session is offline; what names it
// for the failure.
func waitOneOffline(t *testing.T, b *broker, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, func() bool { _, d := sessions(b); return d == 1 })
}

func withExpiry(secs uint32) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		cp.Props.SessionExpiry = secs
		cp.Props.Set(packet.PropSessionExpiry)
	}
}

func both(fs ...func(*packet.Connect)) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		for _, f := range fs {
			f(cp)
		}
	}
}
