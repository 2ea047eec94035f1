package listeners_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("EDGEGW_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// harness is a real gateway.Server with listeners started on demand; all of
// it stops (and every goroutine is waited for) in cleanup.
type harness struct {
	t   testing.TB
	srv *gateway.Server
	log *slog.Logger
	ctx context.Context
	wg  sync.WaitGroup

	cns chan string // certCN of every connection that reached the gateway
}

func newHarness(t testing.TB, opts gateway.Options) *harness {
	t.Helper()
	h := &harness{t: t, log: testLogger(), cns: make(chan string, 64)}
	h.srv = gateway.New(opts, h.log)
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		h.wg.Wait()
	})
	return h
}

func (h *harness) establish(ctx context.Context, conn net.Conn, listener, certCN string) error {
	select {
	case h.cns <- certCN:
	default:
	}
	return h.srv.ServeConn(ctx, conn, listener, certCN)
}

// serve runs a listener until the test ends; Serve must return nil.
func (h *harness) serve(l interface {
	Listen() error
	Addr() net.Addr
	Serve(context.Context, listeners.EstablishFunc) error
}) string {
	h.t.Helper()
	if err := l.Listen(); err != nil {
		h.t.Fatal(err)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := l.Serve(h.ctx, h.establish); err != nil {
			h.t.Errorf("serve: %v", err)
		}
	}()
	return l.Addr().String()
}

// ws starts a WebSocket listener on 127.0.0.1:0; mod may adjust it.
func (h *harness) ws(mod func(*listeners.WebSocket)) string {
	l := &listeners.WebSocket{Name: "ws", Address: "127.0.0.1:0", Log: h.log}
	if mod != nil {
		mod(l)
	}
	return h.serve(l)
}

// tcp starts a TCP (TLS when cfg != nil) listener on 127.0.0.1:0.
func (h *harness) tcp(cfg *tls.Config, cnAsUser bool) string {
	return h.serve(&listeners.TCP{Name: "tcp", Address: "127.0.0.1:0", TLS: cfg, UseCNAsUsername: cnAsUser, Log: h.log})
}

// nextCN returns the certCN of the next connection handed to the gateway.
func (h *harness) nextCN() string {
	h.t.Helper()
	select {
	case cn := <-h.cns:
		return cn
	case <-time.After(10 * time.Second):
		h.t.Fatal("no connection reached the gateway")
		return ""
	}
}

// pahoConnect connects a paho client to url ("tcp://", "ws://", "tls://",
// "wss://") and disconnects it in cleanup.
func pahoConnect(t testing.TB, url, id string, mod func(*mqtt.ClientOptions)) (mqtt.Client, error) {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetKeepAlive(30 * time.Second).SetOrderMatters(true)
	if mod != nil {
		mod(o)
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, context.DeadlineExceeded
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, nil
}

func mustPaho(t testing.TB, url, id string, mod func(*mqtt.ClientOptions)) mqtt.Client {
	t.Helper()
	c, err := pahoConnect(t, url, id, mod)
	if err != nil {
		t.Fatalf("connect %s to %s: %v", id, url, err)
	}
	return c
}

func waitTok(t testing.TB, tok mqtt.Token, what string) {
	t.Helper()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// collector gathers received payloads.
type collector struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collector) handle(_ mqtt.Client, m mqtt.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m.Topic()+"="+string(m.Payload()))
	c.mu.Unlock()
}

func (c *collector) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

// pubSub subscribes through sub, publishes n QoS 1 messages through pub and
// checks they all arrive in order.
func pubSub(t *testing.T, sub, pub mqtt.Client, topic string, n int) {
	t.Helper()
	var got collector
	waitTok(t, sub.Subscribe(topic, 1, got.handle), "subscribe")
	var want []string
	for i := range n {
		p := strings.Repeat("x", i*100) + "#" + string(rune('a'+i%26))
		want = append(want, topic+"="+p)
		waitTok(t, pub.Publish(topic, 1, false, p), "publish")
	}
	testutil.Eventually(t, 10*time.Second, "all messages", func() bool { return len(got.get()) >= n })
	if g := got.get(); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %d messages %.200q, want %d", len(g), g, len(want))
	}
}
