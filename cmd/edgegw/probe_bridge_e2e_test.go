package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// pubrelHoldProxy forwards TCP connections to target. Towards target it
// reads whole MQTT packets; at the first PUBREL it sees (once per proxy)
// it forwards nothing more of that connection (the PUBREL is lost on the
// way, as on a link that dies right then). Answers from target pass unchanged. While closed, it
// drops new connections at once (the cloud is unreachable).
type pubrelHoldProxy struct {
	ln     net.Listener
	target string
	open   atomic.Bool
	held   atomic.Int32 // 1 once a PUBREL was swallowed
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startPubrelHoldProxy(t *testing.T, target string) *pubrelHoldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pubrelHoldProxy{ln: ln, target: target}
	p.open.Store(true)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *pubrelHoldProxy) addr() string { return p.ln.Addr().String() }

func (p *pubrelHoldProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.open.Load() {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // upstream -> bridge: unchanged
			defer p.wg.Done()
			defer c.Close()
			defer u.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // bridge -> upstream: packet by packet, until a PUBREL
			defer p.wg.Done()
			defer c.Close()
			defer u.Close()
			p.towardsTarget(c, u)
		}()
	}
}

// towardsTarget copies whole MQTT packets from src to dst; from the
// proxy's first PUBREL (fixed header 0x62) on, it reads and discards.
func (p *pubrelHoldProxy) towardsTarget(src, dst net.Conn) {
	var pending []byte
	holding := false
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		pending = append(pending, buf[:n]...)
		for !holding {
			size, ok := mqttPacketLen(pending)
			if !ok {
				break
			}
			if pending[0] == 0x62 && p.held.CompareAndSwap(0, 1) {
				holding = true
				break
			}
			if _, werr := dst.Write(pending[:size]); werr != nil {
				return
			}
			pending = pending[size:]
		}
		if holding {
			pending = pending[:0]
		}
		if err != nil {
			return
		}
	}
}

// mqttPacketLen returns the length of the whole packet at the start of b
// (fixed header + remaining length), if b holds all of it.
func mqttPacketLen(b []byte) (int, bool) {
	rem, mult := 0, 1
	for i := 1; i < len(b) && i <= 4; i++ {
		rem += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			total := 1 + i + rem
			return total, len(b) >= total
		}
		mult *= 128
	}
	return 0, false
}

// TestProbeQoS2PubrelToBrokerThatLostTheSession: a cloud broker that comes
// back without the bridge's session (restarted without persistence, or a
// failover address) answers CONNECT with session present = 0. Over MQTT
// 3.1.1 the bridge then still re-sends the PUBREL of a QoS 2 flow whose
// PUBREC it had: the new broker answers PUBCOMP for a message it never had
// (MQTT lets it), the bridge takes that as delivered and removes the record
// from its spool, and a message the sensor was acknowledged for never
// reaches the cloud. docs/bridge.md: "At least once upstream" and "With
// clean_session: true the broker forgot them, and they are sent again as
// new messages"; the MQTT 5 uplink does that when session present is 0
// (bridge/session5.go ConAckReceived), the 3.1.1 one does not.
//
// The same over MQTT 5 (docs/bridge.md: "MQTT 3.1.1 and 5 alike"), and in
// both the WARN line that names the flows sent again.
func TestProbeQoS2PubrelToBrokerThatLostTheSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	for _, proto := range []string{"3.1.1", "5"} {
		t.Run("MQTT "+proto, func(t *testing.T) { probeQoS2PubrelToBrokerThatLostTheSession(t, bin, proto) })
	}
}

func probeQoS2PubrelToBrokerThatLostTheSession(t *testing.T, bin, proto string) {
	local, cloud := freePort(t), freePort(t)
	lhost, lport, _ := net.SplitHostPort(local)
	chost, cport, _ := net.SplitHostPort(cloud)
	cp, _ := strconv.Atoi(cport)
	// Debian mosquitto's defaults: no persistence.
	up := testutil.StartMosquitto(t, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", cp), cp)
	proxy := startPubrelHoldProxy(t, cloud)
	cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
persistence: {dir: "%s", sync: batch, sync_interval: 10ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-probe
    protocol: "%s"
    clean_session: false
    keepalive: 30s
    ack_timeout: 30s
    reconnect_min: 100ms
    reconnect_max: 300ms
    topics:
      - {pattern: "sensors/#", direction: out, qos: 2, remote_prefix: "site/"}
`, local, t.TempDir(), proxy.addr(), proto))
	g := startEdgegw(t, bin, "--config", cfg)
	waitListening(t, local)
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return strings.Contains(g.logs(), "connected") })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := func(msg string) {
		t.Helper()
		// mosquitto_pub -q 2 exits 0 once edgegw sent PUBCOMP: the message
		// is acknowledged.
		out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", lhost, "-p", lport, "-q", "2",
			"-i", "sensor-"+msg, "-t", "sensors/t1", "-m", msg).CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_pub %s: %v %s", msg, err, out)
		}
	}

	// m1 reaches mosquitto, which answers PUBREC; the bridge's PUBREL is
	// lost with the link.
	pub("m1")
	testutil.Eventually(t, 10*time.Second, "the bridge's PUBREL of m1", func() bool { return proxy.held.Load() > 0 })

	// The cloud broker restarts without the session; the reader is
	// subscribed before the bridge can reach it again.
	proxy.open.Store(false)
	up.Kill()
	up.Start()
	got := make(chan string, 16)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + net.JoinHostPort(chost, cport)).
		SetClientID("cloud-reader").SetAutoReconnect(false).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }))
	if tok := sub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud reader connect: %v", tok.Error())
	}
	defer sub.Disconnect(0)
	if tok := sub.Subscribe("site/#", 2, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud reader subscribe: %v", tok.Error())
	}
	proxy.open.Store(true)

	// A later message shows the bridge is through; m1 must arrive too.
	pub("m2")
	seen := map[string]int{}
	deadline := time.After(20 * time.Second)
	for seen["m2"] == 0 {
		select {
		case m := <-got:
			seen[m]++
		case <-deadline:
			t.Fatalf("m2 did not reach the cloud; got %v", seen)
		}
	}
	grace := time.After(3 * time.Second)
	for seen["m1"] == 0 {
		select {
		case m := <-got:
			seen[m]++
		case <-grace:
			t.Fatalf("m1, acknowledged to its sensor (PUBCOMP), never reached the cloud: after the broker lost the session "+
				"(CONNACK session present 0) the bridge re-sent only m1's PUBREL, the broker completed it with nothing, "+
				"and the record left the spool; the cloud got %v", seen)
		}
	}
	if seen["m1"] > 1 || seen["m2"] > 1 {
		t.Fatalf("QoS 2 duplicates at the cloud: %v", seen)
	}
	// docs/bridge.md: "One WARN line says so, with the number of flows."
	if logs := g.logs(); !strings.Contains(logs, "upstream has no session for the bridge") || !strings.Contains(logs, "flows=1") {
		t.Fatalf("no WARN line naming the 1 flow sent again as a new message; logs:\n%s", logs)
	}
}
