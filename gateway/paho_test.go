package gateway_test

// Real Eclipse Paho clients against the broker: paho.mqtt.golang (3.1.1)
// round-trips at every QoS; paho.golang (MQTT 5) keeps to the limits the
// broker announces, so it is never cut for exceeding its Receive Maximum,
// and it is told Server Keep Alive.

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
)

func pahoClient(t testing.TB, addr, id string, clean bool, mod func(*mqtt.ClientOptions)) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetCleanSession(clean).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).SetKeepAlive(30 * time.Second).SetOrderMatters(true)
	if mod != nil {
		mod(o)
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

func waitTok(t testing.TB, tok mqtt.Token, what string) {
	t.Helper()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// collector gathers received messages.
type collector struct {
	mu   sync.Mutex
	msgs []mqtt.Message
}

func (c *collector) handle(_ mqtt.Client, m mqtt.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) payloads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.msgs))
	for i, m := range c.msgs {
		out[i] = string(m.Payload())
	}
	return out
}

func TestPahoRoundTrip(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, qos := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			var got collector
			sub := pahoClient(t, b.addr, fmt.Sprintf("sub%d", qos), true, nil)
			waitTok(t, sub.Subscribe("rt/+/x", qos, got.handle), "subscribe")
			pub := pahoClient(t, b.addr, fmt.Sprintf("pub%d", qos), true, nil)
			const n = 100
			for i := 0; i < n; i++ {
				waitTok(t, pub.Publish(fmt.Sprintf("rt/%d/x", i), qos, false, fmt.Sprint(i)), "publish")
			}
			testutil.Eventually(t, 10*time.Second, "all messages", func() bool { return got.len() >= n })
			if qos > 0 {
				// In order, exactly once.
				for i, p := range got.payloads() {
					if p != fmt.Sprint(i) {
						t.Fatalf("message %d = %q", i, p)
					}
				}
			}
		})
	}
}

func paho5Connect(t *testing.T, addr, id string, keepAlive uint16) (*paho.Client, *paho.Connack) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: keepAlive})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	})
	return c, ack
}

// TestPaho5KeepsReceiveMaximum: 64 concurrent QoS 1 and QoS 2 publishes
// through a Receive Maximum of 4 all complete, with acks held by a sink
// and released by the test, and no connection is cut.
func TestPaho5KeepsReceiveMaximum(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 4})
	sink := &heldSink{}
	if err := b.srv.AddSink("held", "held/#", sink); err != nil {
		t.Fatal(err)
	}
	c, ack := paho5Connect(t, b.addr, "paho5-rm", 30)
	if ack.Properties == nil || ack.Properties.ReceiveMaximum == nil || *ack.Properties.ReceiveMaximum != 4 {
		t.Fatalf("connack properties %+v, want receive maximum 4", ack.Properties)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 64
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Publish(ctx, &paho.Publish{Topic: "held/x", QoS: byte(1 + i%2), Payload: []byte("m")})
			errs <- err
		}()
	}
	// Release verdicts as they come: never more than 4 may be open.
	released := 0
	for released < n {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("a held message after %d released", released), func() bool { return sink.count() > released })
		if open := sink.count() - released; open > 4 {
			t.Fatalf("%d messages held at once, above the receive maximum 4", open)
		}
		sink.release(released, nil)
		released++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if got := closes(b, "protocol_error"); got != 0 {
		t.Fatalf("%d protocol error closes, want 0", got)
	}
}

// TestPaho5ServerKeepAlive: a client asking for keepalive 0 (never) is
// told limits.keepalive_max as Server Keep Alive.
func TestPaho5ServerKeepAlive(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxKeepAlive: 30 * time.Second})
	_, ack := paho5Connect(t, b.addr, "paho5-ka", 0)
	if ack.Properties == nil || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 30 {
		t.Fatalf("connack properties %+v, want server keepalive 30", ack.Properties)
	}
}
