package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// TestLowRateWritesInline: at sensor rates a message reaches an idle
// subscriber, and its acknowledgements reach the publisher, without a
// writer goroutine started per message (their start and exit were a third
// of the broker's CPU at 2,000 msg/s). Each message is sent only
// after the previous one arrived (and its acks were exchanged), so nearly
// every write finds an idle connection.
func TestLowRateWritesInline(t *testing.T) {
	for _, qos := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			srv := New(Options{AllowAnonymous: true}, nil)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); srv.Run(ctx) }()
			go func() {
				defer wg.Done()
				var cwg sync.WaitGroup
				defer cwg.Wait()
				for {
					conn, err := l.Accept()
					if err != nil {
						return
					}
					cwg.Add(1)
					go func() { defer cwg.Done(); srv.ServeConn(ctx, conn, "test", "") }()
				}
			}()
			t.Cleanup(func() { cancel(); l.Close(); wg.Wait() })

			sub := dialRaw(t, l.Addr().String(), "sub")
			sub.send(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "sensors/#", QoS: qos}}})
			if _, ok := sub.next(t).(*packet.Suback); !ok {
				t.Fatal("no SUBACK")
			}
			pub := dialRaw(t, l.Addr().String(), "pub")
			before := srv.stats.writers.Load()

			const n = 50
			for i := 1; i <= n; i++ {
				pub.send(t, &packet.Publish{QoS: qos, PacketID: uint16(i * int(min(qos, 1))), Topic: "sensors/a", Payload: []byte("21.5")})
				switch qos {
				case 1:
					if a, ok := pub.next(t).(*packet.Puback); !ok || a.PacketID != uint16(i) {
						t.Fatalf("message %d: no PUBACK", i)
					}
				case 2:
					if _, ok := pub.next(t).(*packet.Pubrec); !ok {
						t.Fatalf("message %d: no PUBREC", i)
					}
					pub.send(t, &packet.Pubrel{PacketID: uint16(i)})
					if _, ok := pub.next(t).(*packet.Pubcomp); !ok {
						t.Fatalf("message %d: no PUBCOMP", i)
					}
				}
				p, ok := sub.next(t).(*packet.Publish)
				if !ok || string(p.Payload) != "21.5" {
					t.Fatalf("message %d: subscriber got %v", i, p)
				}
				switch qos {
				case 1:
					sub.send(t, &packet.Puback{PacketID: p.PacketID})
				case 2:
					sub.send(t, &packet.Pubrec{PacketID: p.PacketID})
					if _, ok := sub.next(t).(*packet.Pubrel); !ok {
						t.Fatalf("message %d: no PUBREL", i)
					}
					sub.send(t, &packet.Pubcomp{PacketID: p.PacketID})
				}
			}
			// Not exactly 0: the subscriber's ack of message i is read while
			// message i+1 is routed, and a flush that finds work arriving
			// round after round hands it to a goroutine (maxInlineRounds).
			// Per message (the design before) would be n or more.
			if started := srv.stats.writers.Load() - before; started > n/10 {
				t.Fatalf("%d writer goroutines started for %d messages on idle connections, want at most %d", started, n, n/10)
			}
		})
	}
}

type rawTestConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr, id string) *rawTestConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawTestConn{c: c, br: bufio.NewReader(c)}
	rc.send(t, &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: id, CleanStart: true})
	if _, ok := rc.next(t).(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	return rc
}

func (rc *rawTestConn) send(t *testing.T, p packet.Packet) {
	t.Helper()
	b, err := packet.Append(nil, p, packet.V311)
	if err != nil {
		t.Fatal(err)
	}
	rc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (rc *rawTestConn) next(t *testing.T) packet.Packet {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := packet.Decode(rc.br, packet.V311, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
