package wire_test

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// pair returns a Conn over TCP loopback and the peer's end, which reads
// nothing unless the test does.
func pair(t *testing.T, codec wire.Codec, timeout time.Duration) (*wire.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c := wire.New(nc, codec, wire.Options{WriteTimeout: timeout})
	t.Cleanup(func() { c.Abort(nil) })
	return c, peer
}

// TestControlNeverWaitsBehindData: with the peer reading nothing, the
// data lane fills and Send waits; SendControl still returns at once, and
// the stuck write breaks the connection within the write timeout.
func TestControlNeverWaitsBehindData(t *testing.T) {
	for _, codec := range []wire.Codec{wire.Codec311{}, wire.Codec5{}} {
		t.Run(codec.Version().String(), func(t *testing.T) {
			c, _ := pair(t, codec, time.Second)
			sendDone := make(chan error, 1)
			go func() {
				big := &packet.Publish{Topic: "t", Payload: make([]byte, 256<<10)}
				for {
					if err := c.Send(big); err != nil {
						sendDone <- err
						return
					}
				}
			}()
			for range 100 {
				if err := c.SendControl(&packet.Pingreq{}); err != nil && !errors.Is(err, wire.ErrWriteTimeout) {
					t.Fatalf("SendControl: %v", err)
				}
			}
			testutil.Eventually(t, 10*time.Second, "the stuck write found", func() bool {
				select {
				case <-c.Done():
					return true
				default:
					return false
				}
			})
			if err := c.Err(); !errors.Is(err, wire.ErrWriteTimeout) {
				t.Fatalf("broke with %v, want a write timeout", err)
			}
			if err := <-sendDone; err == nil {
				t.Fatal("Send succeeded on a broken connection")
			}
		})
	}
}

// TestControlLaneGoesFirst: packets queued in the control lane are
// written before data queued earlier and not yet written.
func TestControlLaneGoesFirst(t *testing.T) {
	c, peer := pair(t, wire.Codec311{}, 5*time.Second)
	// Fill the socket so the next packets wait in the lanes together.
	big := &packet.Publish{Topic: "t", Payload: make([]byte, 8<<20)}
	if err := c.Send(big); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(&packet.Publish{Topic: "d", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := c.SendControl(&packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	r := wire.New(peer, wire.Codec311{}, wire.Options{WriteTimeout: time.Second})
	defer r.Abort(nil)
	var order []string // the packets in the order read
	for len(order) < 3 {
		p, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		name := p.Type().String()
		if pub, ok := p.(*packet.Publish); ok {
			name += " " + pub.Topic
		}
		order = append(order, name)
	}
	// The large PUBLISH may or may not have been taken by the writer
	// before the others were queued; either way the PINGREQ precedes the
	// PUBLISH queued before it.
	if slices.Index(order, packet.PINGREQ.String()) > slices.Index(order, "PUBLISH d") {
		t.Fatalf("order %v: the PINGREQ did not overtake the queued PUBLISH", order)
	}
}
