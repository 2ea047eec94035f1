package bridge_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// flagRefuser is an upstream that refuses the bridge flag, as NATS does:
// a CONNECT with protocol level 0x84 gets CONNACK "unacceptable protocol
// version"; any other is passed on to target.
func flagRefuser(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				head := []byte{}
				b, err := r.ReadByte()
				if err != nil {
					return
				}
				head = append(head, b)
				n, mul := 0, 1
				for {
					b, err := r.ReadByte()
					if err != nil {
						return
					}
					head = append(head, b)
					n += int(b&0x7f) * mul
					mul *= 128
					if b&0x80 == 0 {
						break
					}
				}
				body := make([]byte, n)
				if _, err := io.ReadFull(r, body); err != nil || len(body) < 7 {
					return
				}
				if body[6] == 0x84 {
					c.Write([]byte{0x20, 2, 0, 1}) // [MQTT-3.1.2-2](3.1.1)
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				up.Write(append(head, body...))
				done := make(chan struct{})
				go func() { io.Copy(c, up); c.Close(); close(done) }()
				io.Copy(up, r)
				up.Close()
				<-done
			}()
		}
	}()
	return "tcp://" + l.Addr().String()
}

// TestBridgeFlagPerUpstream: with bridge_flag auto the bridge flag is
// dropped for the address that refuses it, and only for it; Stats says
// which protocol each connection ended on. With always the refusal is a
// connect failure; never sends plain 3.1.1 to a broker that takes the
// flag.
func TestBridgeFlagPerUpstream(t *testing.T) {
	up := startMosquitto(t)
	refuser := flagRefuser(t, up.addr())
	gw := startGateway(t)

	cfg := testConfig(t, "flag", refuser, up.url())
	cfg.AddressOrder = bridge.AddressOrderStrict
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	if st := b.Stats(); st.Address != refuser || st.Upstream.Protocol != bridge.Protocol311 || st.Upstream.BridgeFlag || !st.Upstream.BridgeFlagRefused {
		t.Errorf("through the refusing address: %s %+v", st.Address, st.Upstream)
	}
	b.stop(t)

	cfg = testConfig(t, "flag2", up.url())
	b = runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	if st := b.Stats(); !st.Upstream.BridgeFlag || st.Upstream.BridgeFlagRefused {
		t.Errorf("into mosquitto: %+v, want the bridge flag", st.Upstream)
	}
	b.stop(t)

	cfg = testConfig(t, "never", up.url())
	cfg.BridgeFlag = bridge.BridgeFlagNever
	b = runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	if st := b.Stats(); st.Upstream.BridgeFlag {
		t.Errorf("bridge_flag never: %+v", st.Upstream)
	}
	b.stop(t)

	cfg = testConfig(t, "always", refuser)
	cfg.BridgeFlag = bridge.BridgeFlagAlways
	b = runBridge(t, cfg, gw.srv)
	testutil.Eventually(t, 10*time.Second, "a refused connect", func() bool { return b.Stats().ConnectFailures > 1 })
	if st := b.Stats(); st.Connects != 0 || !strings.Contains(st.LastError, "bridge_flag is always") {
		t.Errorf("bridge_flag always: %d connects, last error %q", st.Connects, st.LastError)
	}
}

// TestUpstreamGrantsLearned: an MQTT 5 upstream's CONNACK is shown:
// mosquitto's default Receive Maximum (its max_inflight_messages, 20),
// QoS 2 and retain granted.
func TestUpstreamGrantsLearned(t *testing.T) {
	up := startMosquittoConf(t, "max_inflight_messages 7\n")
	gw := startGateway(t)
	cfg := testConfig(t, "v5", up.url())
	cfg.Protocol = bridge.Protocol5
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	want := bridge.Upstream{Protocol: bridge.Protocol5, MaxQoS: 2, RetainAvailable: true, ReceiveMaximum: 7}
	if st := b.Stats(); st.Upstream != want {
		t.Errorf("upstream %+v, want %+v", st.Upstream, want)
	}
}

// TestQoS2IntoMaxQoS1: QoS 2 rules into an upstream that grants QoS 1 at
// most (mosquitto max_qos 1): over MQTT 5 the bridge learns it from the
// CONNACK, over 3.1.1 from upstream_max_qos: 1. With qos_not_granted
// downgrade (the default) all 300 messages arrive, at QoS 1, counted as
// downgraded, none dropped; with hold none is sent or lost: they stay in
// the spool, the bridge says it holds them, and a bridge restarted on the
// spool with downgrade delivers every one.
func TestQoS2IntoMaxQoS1(t *testing.T) {
	const n = 300
	for _, proto := range []string{bridge.Protocol5, bridge.Protocol311} {
		t.Run("downgrade/mqtt"+proto, func(t *testing.T) {
			up := startMosquittoConf(t, "max_qos 1\n")
			gw := startGateway(t)
			upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
			cfg := testConfig(t, "q", up.url())
			cfg.Protocol = proto
			if proto == bridge.Protocol311 {
				cfg.UpstreamMaxQoS = 1
			}
			cfg.Topics = []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: 2, RemotePrefix: "site-a/"}}
			b := runBridge(t, cfg, gw.srv)
			b.waitState(t, bridge.Connected)
			publishQoS(t, client(t, gw.addr, "local-pub"), "sensors/t", 2, n)
			testutil.Eventually(t, 30*time.Second, "all upstream", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t") == n })
			st := b.Stats()
			if st.Upstream.MaxQoS != 1 || st.QoSDowngraded < n || st.UpstreamDropped != 0 || st.QoSHeld {
				t.Errorf("stats: upstream %+v, downgraded %d, dropped %d, held %v", st.Upstream, st.QoSDowngraded, st.UpstreamDropped, st.QoSHeld)
			}
			testutil.Eventually(t, 10*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
		})
	}
	t.Run("hold/mqtt5", func(t *testing.T) {
		up := startMosquittoConf(t, "max_qos 1\n")
		gw := startGateway(t)
		upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
		cfg := testConfig(t, "q", up.url())
		cfg.Protocol = bridge.Protocol5
		cfg.QoSNotGranted = bridge.QoSHold
		cfg.Topics = []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: 2, RemotePrefix: "site-a/"}}
		b := runBridge(t, cfg, gw.srv)
		b.waitState(t, bridge.Connected)
		publishQoS(t, client(t, gw.addr, "local-pub"), "sensors/t", 2, n)
		testutil.Eventually(t, 10*time.Second, "held", func() bool { return b.Stats().QoSHeld && b.Stats().SpoolMessages == n })
		if got := len(upSub.all()); got != 0 {
			t.Errorf("%d messages upstream while held", got)
		}
		if st := b.Stats(); st.QoSPolicy != "hold (upstream_max_qos 2)" {
			t.Errorf("policy %q", st.QoSPolicy)
		}
		b.stop(t)
		cfg.QoSNotGranted = bridge.QoSDowngrade
		b = runBridge(t, cfg, gw.srv)
		testutil.Eventually(t, 30*time.Second, "all upstream after the switch", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t") == n })
	})
}

// publishQoS publishes n messages "m0".. "m<n-1>" on topic at qos,
// pipelined, and waits for every local ack.
func publishQoS(t *testing.T, c mqtt.Client, topic string, qos byte, n int) {
	t.Helper()
	toks := make([]mqtt.Token, n)
	for i := range n {
		toks[i] = c.Publish(topic, qos, false, fmt.Sprintf("m%d", i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
}
