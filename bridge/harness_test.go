package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/listeners"
)

func TestMain(m *testing.M) {
	// paho logs through package globals that the first bridge.New sets;
	// do it before any test client of paho exists.
	if _, err := bridge.New(bridge.Config{Name: "init", Addresses: []string{"tcp://127.0.0.1:1"}, CleanSession: true,
		Topics: []bridge.Rule{{Pattern: "#", Direction: bridge.Out}}}, nopGateway{}, testLog()); err != nil {
		panic(err)
	}
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

// eventually polls cond until it holds or d passes (never sleep to wait).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	t     testing.TB
	port  int   // the plain listener
	ports []int // every listener: start waits for each
	conf  string
	cmd   *exec.Cmd
	done  chan struct{}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startMosquitto(t testing.TB) *mosquitto { return startMosquittoConf(t, "") }

// startMosquittoDefault starts mosquitto with its default configuration:
// one listener and anonymous access (which 2.x refuses by default on a
// configured listener), nothing tuned. In particular max_inflight_messages
// is its default 20, max_queued_messages 1000, persistence off.
func startMosquittoDefault(t testing.TB) *mosquitto {
	t.Helper()
	m := &mosquitto{t: t, port: freePort(t)}
	m.ports = []int{m.port}
	m.conf = filepath.Join(t.TempDir(), "mosquitto.conf")
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", m.port)
	if os.Getenv("EDGEGW_TEST_DEBUG") == "" {
		conf += "log_dest none\n" // where it logs, not how it behaves
	}
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.stop)
	return m
}

// startMosquittoConf starts mosquitto with a plain listener and extra
// configuration lines after it (more listeners, such as a TLS one); start
// waits for every port in extraPorts too.
func startMosquittoConf(t testing.TB, extra string, extraPorts ...int) *mosquitto {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/mosquitto"); err != nil {
		t.Skip("mosquitto not installed (Debian package mosquitto)")
	}
	m := &mosquitto{t: t, port: freePort(t)}
	m.ports = append([]int{m.port}, extraPorts...)
	m.conf = filepath.Join(t.TempDir(), "mosquitto.conf")
	conf := "allow_anonymous true\npersistence false\nmax_queued_messages 100000\n"
	if os.Getenv("EDGEGW_TEST_DEBUG") == "" {
		conf += "log_dest none\n"
	}
	conf += fmt.Sprintf("listener %d 127.0.0.1\n", m.port) + extra
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *mosquitto) addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }
func (m *mosquitto) url() string  { return "tcp://" + m.addr() }

func (m *mosquitto) start() {
	m.t.Helper()
	m.cmd = exec.Command("/usr/sbin/mosquitto", "-c", m.conf)
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(m.cmd, m.done)
	for _, port := range m.ports {
		eventually(m.t, 10*time.Second, "mosquitto listening", func() bool {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	}
}

// stop kills mosquitto (SIGKILL: nothing is flushed, like a crash).
func (m *mosquitto) stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
}

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
