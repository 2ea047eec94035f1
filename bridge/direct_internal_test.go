package bridge

import (
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge/spool"
)

// TestPahoTailReleasedWhenCompletedFirst: the sender waits for the last
// PUBLISH left to paho to pass the connection's Write before it writes
// one itself (direct.go pahoTail). paho's writer marks it written only
// after the batch writer took it, and the flusher may put it on the wire,
// and the reader complete its flow (Del), before that: a QoS 1 PUBACK
// re-sent on connect, or a fast QoS 2 round trip. A completed flow was
// written; the wait must end, or the sender stalls on a healthy
// connection with nothing in flight for the watchdog to see.
func TestPahoTailReleasedWhenCompletedFirst(t *testing.T) {
	t.Run("qos2 publish", func(t *testing.T) {
		s := newUplinkStore(func(spool.ID) {})
		e := s.announce(1, wireID(1))
		s.Put("o.1", publishPacket(1, 2))
		if !s.taken(e) {
			t.Fatal("not stored")
		}
		tail := e.written // uplink311.publish: s.pahoTail
		s.Del("o.1")      // PUBCOMP read before paho's Write returned
		s.markWritten(1)  // finds nothing to mark
		select {
		case <-tail:
		default:
			t.Fatal("the wait for paho's last PUBLISH is never released")
		}
	})
	t.Run("resent on connect", func(t *testing.T) {
		s := newUplinkStore(func(spool.ID) {})
		s.announceDirect(1, wireID(1), spool.Message{Topic: "t", QoS: 1, Payload: []byte("x")})
		s.All() // paho resumes: the direct publish becomes its
		tail := s.resendTail()
		if tail == nil {
			t.Fatal("no resend tail")
		}
		s.Del("o.1") // PUBACK read before paho's Write returned
		s.markWritten(1)
		select {
		case <-tail:
		default:
			t.Fatal("the wait for the re-sent PUBLISHes is never released")
		}
	})
}

// The direct path tells paho's keepalive of its traffic through an
// interface assertion (direct.go keepaliveClient), which would fail
// silently if paho renamed the methods: busy uplinks would be pinged and
// dropped again (TestBusyUplinkNeedsNoPing). This says so at once.
func TestPahoClientTakesKeepaliveReports(t *testing.T) {
	if _, ok := mqtt.NewClient(mqtt.NewClientOptions()).(keepaliveClient); !ok {
		t.Fatal("paho's client has no UpdateLastSent/UpdateLastReceived: the direct path cannot tell its keepalive of traffic")
	}
}
