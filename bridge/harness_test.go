package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
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

type nopGateway struct{}

func (nopGateway) Publish(*gateway.Message) error             { return nil }
func (nopGateway) AddSink(string, string, gateway.Sink) error { return nil }
func (nopGateway) RemoveSink(string, string)                  {}

func testLog() *slog.Logger {
	level := slog.LevelError
	if os.Getenv("EDGEGW_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// local is a gateway.Server with a TCP listener for local paho clients.
type local struct {
	srv  *gateway.Server
	addr string
}

func startGateway(t testing.TB) *local {
	t.Helper()
	log := testLog()
	srv := gateway.New(gateway.Options{AllowAnonymous: true, MaxPacketSize: 16 << 20}, log)
	l := &listeners.TCP{Name: "test", Address: "127.0.0.1:0", Log: log}
	if err := l.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); l.Serve(ctx, srv.ServeConn) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &local{srv: srv, addr: l.Addr().String()}
}

// mosquitto is Debian's broker as the cloud upstream, on a fixed free port
// so that it can be killed and restarted at the same address.
type mosquitto struct {
	*testutil.Mosquitto
	port int // the plain listener
}

func freePort(t testing.TB) int { return testutil.FreePort(t) }

func startMosquitto(t testing.TB) *mosquitto { return startMosquittoConf(t, "") }

// startMosquittoDefault starts mosquitto with its default configuration:
// one listener and anonymous access (which 2.x refuses by default on a
// configured listener), nothing tuned. In particular max_inflight_messages
// is its default 20, max_queued_messages 1000, persistence off.
func startMosquittoDefault(t testing.TB) *mosquitto {
	t.Helper()
	port := freePort(t)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", port)
	if os.Getenv("EDGEGW_TEST_DEBUG") == "" {
		conf += "log_dest none\n" // where it logs, not how it behaves
	}
	return &mosquitto{Mosquitto: testutil.StartMosquitto(t, conf, port), port: port}
}

// startMosquittoConf starts mosquitto with a plain listener and extra
// configuration lines after it (more listeners, such as a TLS one); start
// waits for every port in extraPorts too.
func startMosquittoConf(t testing.TB, extra string, extraPorts ...int) *mosquitto {
	t.Helper()
	port := freePort(t)
	conf := "allow_anonymous true\npersistence false\nmax_queued_messages 100000\n"
	if os.Getenv("EDGEGW_TEST_DEBUG") == "" {
		conf += "log_dest none\n"
	}
	conf += fmt.Sprintf("listener %d 127.0.0.1\n", port) + extra
	return &mosquitto{Mosquitto: testutil.StartMosquitto(t, conf, append([]int{port}, extraPorts...)...), port: port}
}

func (m *mosquitto) addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }
func (m *mosquitto) url() string  { return "tcp://" + m.addr() }

// rx is a message a collector received.
type rx struct {
	topic   string
	payload string
	qos     byte
	retain  bool
}

// collector records messages received by a paho client.
type collector struct {
	mu   sync.Mutex
	msgs []rx
}

func (c *collector) handle(_ mqtt.Client, m mqtt.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, rx{m.Topic(), string(m.Payload()), m.Qos(), m.Retained()})
	c.mu.Unlock()
}

func (c *collector) all() []rx {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]rx(nil), c.msgs...)
}

// len is the number of messages received so far (cheap enough to poll
// while thousands arrive).
func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) count(topic string) int {
	n := 0
	for _, m := range c.all() {
		if m.topic == topic {
			n++
		}
	}
	return n
}

func (c *collector) has(topic, payload string) bool {
	for _, m := range c.all() {
		if m.topic == topic && m.payload == payload {
			return true
		}
	}
	return false
}

// client connects a paho MQTT 3.1.1 client to addr; it is disconnected in
// cleanup.
func client(t testing.TB, addr, id string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetProtocolVersion(4).SetConnectTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s to %s: %v", id, addr, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

// subscribe connects a client subscribed to filter and returns what it
// receives.
func subscribe(t testing.TB, addr, id, filter string, qos byte) *collector {
	t.Helper()
	col := &collector{}
	c := client(t, addr, id)
	tok := c.Subscribe(filter, qos, col.handle)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return col
}

// publish publishes and waits for the ack.
func publish(t testing.TB, c mqtt.Client, topic string, qos byte, payload string) {
	t.Helper()
	tok := c.Publish(topic, qos, false, payload)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// publishMany publishes n QoS 1 messages "<prefix><i>" pipelined and waits
// for every local ack.
func publishMany(t testing.TB, c mqtt.Client, topic string, n int, prefix string) {
	t.Helper()
	toks := make([]mqtt.Token, n)
	for i := range n {
		toks[i] = c.Publish(topic, 1, false, prefix+strconv.Itoa(i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
}

// inOrder checks that payloads prefix0..prefix(n-1) all arrived on topic
// and that their first copies are in order; it returns the duplicates.
func inOrder(t testing.TB, msgs []rx, topic, prefix string, n int) (dups int) {
	t.Helper()
	seen := make(map[string]bool)
	next := 0
	for _, m := range msgs {
		if m.topic != topic {
			continue
		}
		if seen[m.payload] {
			dups++
			continue
		}
		seen[m.payload] = true
		if want := prefix + strconv.Itoa(next); m.payload != want {
			t.Fatalf("%s out of order: got %q, want %q", topic, m.payload, want)
		}
		next++
	}
	if next != n {
		t.Fatalf("got %d distinct messages on %s, want %d", next, topic, n)
	}
	return dups
}

// countPrefix counts distinct payloads with prefix on topic.
func countDistinct(msgs []rx, topic string) int {
	seen := make(map[string]bool)
	for _, m := range msgs {
		if m.topic == topic {
			seen[m.payload] = true
		}
	}
	return len(seen)
}
