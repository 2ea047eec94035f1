package gateway_test

// The soak: a QoS 1 subscriber that never acknowledges and keeps
// reconnecting with alternating clean and persistent sessions, while a
// publisher sends as fast as it can (field report 002). Every bound must
// hold while it runs, and everything must be released once the clients
// are gone.
//
// EDGEGW_SOAK_DURATION (a Go duration) sets how long each phase runs. The
// soak runs only when it is set (`make soak-test` sets it to SOAK_DURATION):
// two phases of seconds each are too long for every `go test`.

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("EDGEGW_SOAK_DURATION")
	if s == "" {
		// The soak stays in every go test, short;
		// `make soak-test` runs it for minutes.
		return 2 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("EDGEGW_SOAK_DURATION: %v", err)
	}
	return d
}

const (
	soakTopic         = "my/topic"
	soakPayload       = 4 << 10
	soakMsgSize int64 = soakPayload + int64(len(soakTopic)) // what a queued message is charged
)

// soakPublisher publishes QoS 1 messages with up to window unacknowledged
// until stop is closed. It runs on its own goroutine and reports errors.
func soakPublisher(t *testing.T, addr string, stop <-chan struct{}, sent *atomic.Int64) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	rc := newRawConn(t, conn, packet.V311)
	defer rc.close()
	const window = 32
	slots := make(chan struct{}, window)
	connack := make(chan struct{})
	rc.hook = func(_ *rawClient, p packet.Packet) bool {
		switch p.(type) {
		case *packet.Connack:
			close(connack)
		case *packet.Puback:
			<-slots
		}
		return true
	}
	if err := rc.sendErr(&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "soak-pub", CleanStart: true}); err != nil {
		return err
	}
	rc.start()
	select {
	case <-connack:
	case <-rc.done:
		return fmt.Errorf("publisher: no connack: %v", rc.readErr)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("publisher: no connack")
	}
	payload := make([]byte, soakPayload)
	for id := uint16(1); ; id = id%65535 + 1 {
		select {
		case <-stop:
			// Let the last acks come back, then leave cleanly.
			for range window {
				select {
				case slots <- struct{}{}:
				case <-time.After(10 * time.Second):
					return fmt.Errorf("publisher: acks missing at the end")
				}
			}
			return rc.sendErr(&packet.Disconnect{})
		case slots <- struct{}{}:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("publisher: no PUBACK for 10s")
		}
		if err := rc.sendErr(&packet.Publish{QoS: 1, PacketID: id, Topic: soakTopic, Payload: payload}); err != nil {
			return fmt.Errorf("publisher: %w", err)
		}
		sent.Add(1)
	}
}

// soakSubscriber connects as id every ~300ms, alternating clean and
// persistent sessions, subscribes QoS 1, reads everything and acknowledges
// nothing; half of its connections end without DISCONNECT.
func soakSubscriber(t *testing.T, addr, id string, stop <-chan struct{}, connects *atomic.Int64) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		rc := newRawConn(t, conn, packet.V311)
		rc.hook = func(_ *rawClient, p packet.Packet) bool {
			if _, ok := p.(*packet.Connack); ok {
				connects.Add(1)
			}
			return true // never acknowledged
		}
		b, _ := packet.Append(nil, &packet.Connect{ProtocolName: "MQTT", Version: packet.V311,
			ClientID: id, CleanStart: i%2 == 0, KeepAlive: 60}, packet.V311)
		b, _ = packet.Append(b, &packet.Subscribe{PacketID: 1,
			Subscriptions: []packet.Subscription{{Filter: soakTopic, QoS: 1}}}, packet.V311)
		rc.start()
		werr := rc.write(b)
		select {
		case <-stop:
		case <-time.After(300 * time.Millisecond): // the reproducer's reconnect period
		}
		if i%4 == 1 && werr == nil {
			rc.sendErr(&packet.Disconnect{})
		}
		rc.close()
	}
}

// TestSoakNeverAckingFlappingSubscriber runs the soak (see the top of this
// file).
func TestSoakNeverAckingFlappingSubscriber(t *testing.T) {
	d := soakDuration(t)
	opts := gateway.Options{
		AllowAnonymous:    true,
		MaxQueuedMessages: 100,
		MaxQueuedBytes:    256 << 10,
		MemoryBudget:      1 << 20,
		MaxSessionExpiry:  2 * time.Second,
	}
	for _, tc := range []struct {
		name        string
		subscribers int
		maxBytes    int64 // bound on Stats().QueuedBytes
		maxMsgs     int64 // bound on Stats().QueuedMessages
		drop        string
	}{
		// One session: the per-session bounds hold.
		{"one_subscriber", 1, opts.MaxQueuedBytes + soakMsgSize, int64(opts.MaxQueuedMessages), "queue_full"},
		// Six sessions could queue 1.5 MiB: the global memory budget holds.
		{"six_subscribers", 6, opts.MemoryBudget + soakMsgSize, 6 * int64(opts.MaxQueuedMessages), "memory_budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			baseline := ms.HeapAlloc

			b := startBroker(t, opts)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, tc.subscribers+2)
			var sent, connects atomic.Int64
			wg.Add(1 + tc.subscribers)
			go func() { defer wg.Done(); errs <- soakPublisher(t, b.addr, stop, &sent) }()
			for i := range tc.subscribers {
				go func() {
					defer wg.Done()
					errs <- soakSubscriber(t, b.addr, fmt.Sprintf("slow-sub-%d", i), stop, &connects)
				}()
			}

			// Sample the gauges until the time is up.
			var maxBytes, maxMsgs int64
			var samples int
			end := time.Now().Add(d)
			tick := time.NewTicker(5 * time.Millisecond)
			for time.Now().Before(end) {
				<-tick.C
				st := b.srv.Stats()
				samples++
				maxBytes = max(maxBytes, st.QueuedBytes)
				maxMsgs = max(maxMsgs, st.QueuedMessages)
				if st.QueuedBytes > tc.maxBytes || st.QueuedMessages > tc.maxMsgs {
					break
				}
			}
			tick.Stop()
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			st := b.srv.Stats()
			t.Logf("%d published, %d subscriber connects, %d samples: max queued %d bytes / %d messages; drops %v; closes %v",
				sent.Load(), connects.Load(), samples, maxBytes, maxMsgs, st.Drops, st.Closes)
			if maxBytes > tc.maxBytes {
				t.Errorf("queued bytes reached %d, bound %d", maxBytes, tc.maxBytes)
			}
			if maxMsgs > tc.maxMsgs {
				t.Errorf("queued messages reached %d, bound %d", maxMsgs, tc.maxMsgs)
			}
			if st.Drops[tc.drop] == 0 {
				t.Errorf("no %s drops counted: %v", tc.drop, st.Drops)
			}
			if connects.Load() < int64(tc.subscribers)*2 {
				t.Errorf("subscribers connected only %d times", connects.Load())
			}

			// Everything is released once the clients are gone and the
			// persistent sessions have expired (max 2s).
			testutil.Eventually(t, 15*time.Second, "sessions expired and queues empty", func() bool {
				st := b.srv.Stats()
				return st.Connections == 0 && st.SessionsConnected == 0 && st.SessionsDisconnected == 0 &&
					st.QueuedBytes == 0 && st.QueuedMessages == 0 && st.Inflight == 0 && st.Subscriptions == 0
			})
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			t.Logf("heap: baseline %d KiB, after %d KiB", baseline>>10, ms.HeapAlloc>>10)
			if ms.HeapAlloc > baseline+8<<20 {
				t.Errorf("heap %d KiB after the run, baseline %d KiB: more than 8 MiB retained", ms.HeapAlloc>>10, baseline>>10)
			}
		})
	}
}
