package gateway_test

// Field report 000: a client with an in-flight window of 1 that publishes
// QoS 2 to a topic it is subscribed to (QoS 2) must never deadlock with the
// broker: acknowledgements never wait behind publishes.

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

const selfPublishN = 1000

// selfReceiver records PUBLISHes from the broker on the raw client's reader
// goroutine and completes the QoS 2 exchange (PUBREC, then PUBCOMP on
// PUBREL) there, so it runs concurrently with the test's own publishing.
type selfReceiver struct {
	mu       sync.Mutex
	payloads []string
	problems []string
	pending  map[uint16]bool // PUBREC sent, PUBREL not yet seen
}

func (r *selfReceiver) hook(rc *rawClient, p packet.Packet) bool {
	switch p := p.(type) {
	case *packet.Publish:
		r.mu.Lock()
		if p.QoS != 2 {
			r.problems = append(r.problems, fmt.Sprintf("publish %q with qos %d", p.Payload, p.QoS))
		}
		if r.pending[p.PacketID] {
			r.problems = append(r.problems, fmt.Sprintf("publish id %d again before PUBREL (dup=%v)", p.PacketID, p.Dup))
		} else {
			r.payloads = append(r.payloads, string(p.Payload))
		}
		r.pending[p.PacketID] = true
		r.mu.Unlock()
		rc.sendErr(&packet.Pubrec{PacketID: p.PacketID})
		return true
	case *packet.Pubrel:
		r.mu.Lock()
		delete(r.pending, p.PacketID)
		r.mu.Unlock()
		rc.sendErr(&packet.Pubcomp{PacketID: p.PacketID})
		return true
	}
	return false // PUBREC / PUBCOMP for our own publishes go to the test
}

func (r *selfReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.payloads)
}

func checkInOrderOnce(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	for i, p := range got {
		if p != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: out of order or duplicated", i, p)
		}
	}
}

func TestFieldReport000SelfPublishQoS2(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInflight int
		recvMax     uint16
	}{
		{"receive_maximum_1", 0, 1},
		{"max_inflight_1", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: tc.maxInflight})
			recv := &selfReceiver{pending: map[uint16]bool{}}
			rc := rawDial(t, b.addr, packet.V5)
			rc.hook = recv.hook
			cp := &packet.Connect{ClientID: "self", CleanStart: true, KeepAlive: 60}
			if tc.recvMax > 0 {
				cp.Props.ReceiveMaximum = tc.recvMax
				cp.Props.Set(packet.PropReceiveMaximum)
			}
			rc.connect(cp)
			rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "self/t", QoS: 2})

			// A generous bound: a deadlock shows as a timeout, never a hang.
			deadline := time.Now().Add(90 * time.Second)
			wait := func() time.Duration { return max(time.Until(deadline), time.Millisecond) }
			for i := range selfPublishN {
				id := uint16(i%1000 + 1)
				rc.send(&packet.Publish{QoS: 2, Topic: "self/t", PacketID: id, Payload: []byte(strconv.Itoa(i))})
				rec, err := rc.nextErr(wait())
				if err != nil {
					t.Fatalf("publish %d: waiting for PUBREC: %v (received %d so far)", i, err, recv.count())
				}
				if r, ok := rec.(*packet.Pubrec); !ok || r.PacketID != id || r.ReasonCode.IsError() {
					t.Fatalf("publish %d: got %+v, want PUBREC %d", i, rec, id)
				}
				rc.send(&packet.Pubrel{PacketID: id})
				comp, err := rc.nextErr(wait())
				if err != nil {
					t.Fatalf("publish %d: waiting for PUBCOMP: %v (received %d so far)", i, err, recv.count())
				}
				if c, ok := comp.(*packet.Pubcomp); !ok || c.PacketID != id || c.ReasonCode.IsError() {
					t.Fatalf("publish %d: got %+v, want PUBCOMP %d", i, comp, id)
				}
			}
			testutil.Eventually(t, wait(), "all messages back", func() bool { return recv.count() >= selfPublishN })
			testutil.Eventually(t, wait(), "no QoS 2 delivery open", func() bool {
				st := b.srv.Stats()
				return st.Inflight == 0 && st.QueuedMessages == 0
			})
			recv.mu.Lock()
			defer recv.mu.Unlock()
			if len(recv.problems) > 0 {
				t.Fatalf("protocol problems: %q", recv.problems)
			}
			checkInOrderOnce(t, recv.payloads, selfPublishN)
		})
	}
}

func TestFieldReport000SelfPublishPaho(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 1})
	var got collector
	c := pahoClient(t, b.addr, "self-paho", true, nil)
	waitTok(t, c.Subscribe("self/paho", 2, got.handle), "subscribe")
	for i := range selfPublishN {
		waitTok(t, c.Publish("self/paho", 2, false, strconv.Itoa(i)), fmt.Sprintf("publish %d", i))
	}
	testutil.Eventually(t, 60*time.Second, "all messages back", func() bool { return got.len() >= selfPublishN })
	// Exactly once: nothing more arrives after the broker has nothing open.
	testutil.Eventually(t, 10*time.Second, "deliveries complete", func() bool {
		st := b.srv.Stats()
		return st.Inflight == 0 && st.QueuedMessages == 0
	})
	checkInOrderOnce(t, got.payloads(), selfPublishN)
}
