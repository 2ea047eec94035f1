package gateway_test

import (
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// blockingSink is a synchronous Sink whose Accept waits until the test
// lets it go, as a sink that waits for a disk flush does (Sink: "Accept may
// wait"). It blocks the publisher's reader for as long as it waits.
type blockingSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlockingSink() *blockingSink {
	return &blockingSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *blockingSink) Accept(*gateway.Message) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return nil
}

func (s *blockingSink) let() { s.once.Do(func() { close(s.release) }) }

// TestBlockedReaderDoesNotHoldItsWrites: a connection's reader that is
// blocked handling a packet (here in a synchronous sink) must not hold up
// what other goroutines queue for that connection: a message published in
// process (a bridge's inbound message, a will, $SYS) and the PUBACK that an
// asynchronous sink's verdict releases. Both go out while the reader waits,
// as they did when every kick started a writer goroutine.
func TestBlockedReaderDoesNotHoldItsWrites(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	blk := newBlockingSink()
	t.Cleanup(blk.let) // before the broker stops (cleanups run last first)
	if err := b.srv.AddSink("disk", "blk/#", blk); err != nil {
		t.Fatal(err)
	}
	verdicts := &heldSink{}
	if err := b.srv.AddSink("cloud", "up/#", verdicts); err != nil {
		t.Fatal(err)
	}
	rc, _ := rawConnect(t, b.addr, packet.V311, "c", true, nil)
	rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "in/#", QoS: 0})

	// A QoS 1 message whose ack waits for the cloud sink, then one that
	// blocks the reader in the disk sink.
	rc.send(&packet.Publish{Topic: "up/x", QoS: 1, PacketID: 7, Payload: []byte("m")})
	rc.send(&packet.Publish{Topic: "blk/x", QoS: 0, Payload: []byte("m")})
	select {
	case <-blk.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not reach the blocking sink")
	}
	testutil.Eventually(t, 5*time.Second, "message in the cloud sink", func() bool { return verdicts.count() == 1 })

	// Published in process while the reader is blocked: delivered.
	if err := b.srv.Publish(&gateway.Message{Topic: "in/x", Payload: []byte("inbound")}); err != nil {
		t.Fatal(err)
	}
	if p := rc.nextPublish(5 * time.Second); string(p.Payload) != "inbound" {
		t.Fatalf("got %q, want inbound", p.Payload)
	}
	// The cloud sink keeps the QoS 1 message: its PUBACK goes out.
	verdicts.release(0, nil)
	if a := expect[*packet.Puback](t, rc, 5*time.Second); a.PacketID != 7 {
		t.Fatalf("puback %d, want 7", a.PacketID)
	}
	blk.let()
}
