package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestClientsSnapshot: Server.Clients lists the connected clients with
// their listener, protocol, user, queue and in-flight counts, and flags a
// subscriber that holds a message unacknowledged past the flow-control
// stall as slow; a client that leaves leaves the list.
func TestClientsSnapshot(t *testing.T) {
	b := startBroker(t, gateway.Options{MaxInflight: 1, AllowAnonymous: true})
	before := time.Now()
	sub, _ := rawConnect(t, b.addr, packet.V5, "sub-v5", true, func(c *packet.Connect) {
		c.Username, c.UsernameFlag = "alice", true
	})
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "t/#", QoS: 1})
	other, _ := rawConnect(t, b.addr, packet.V311, "other-311", true, nil)

	// Three QoS 1 messages to a window of one that is never acked: one in
	// flight, two queued.
	for range 3 {
		b.srv.Publish(&gateway.Message{Topic: "t/x", Payload: []byte("p"), QoS: 1})
	}
	sub.nextPublish(5 * time.Second)
	var cs []gateway.ClientInfo
	testutil.Eventually(t, 5*time.Second, "sub-v5 slow with 1 in flight and 2 queued", func() bool {
		cs = b.srv.Clients()
		return len(cs) == 2 && cs[1].ClientID == "sub-v5" && cs[1].Slow && cs[1].Inflight == 1 && cs[1].Queued == 2
	})
	o, s := cs[0], cs[1]
	if o.ClientID != "other-311" || o.Protocol != 4 || o.Slow || o.Queued != 0 || o.Listener != "test" {
		t.Errorf("other: %+v", o)
	}
	if s.Protocol != 5 || s.Username != "alice" || s.Listener != "test" || s.QueuedMem != 3*int64(len("t/x")+len("p")) { // topic and payload of three
		t.Errorf("sub: %+v", s)
	}
	for _, c := range cs {
		if c.Since.Before(before) || c.Since.After(time.Now()) || c.Remote == "" {
			t.Errorf("%s: since %v, remote %q", c.ClientID, c.Since, c.Remote)
		}
	}
	other.disconnect()
	testutil.Eventually(t, 5*time.Second, "other-311 gone", func() bool { return len(b.srv.Clients()) == 1 })
}
