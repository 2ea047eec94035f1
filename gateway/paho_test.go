package gateway_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

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
