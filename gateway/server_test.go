package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

func TestShutdown(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c5, _ := rawConnect(t, b.addr, packet.V5, "sd5", false, withExpiry(60))
	c3, _ := rawConnect(t, b.addr, packet.V311, "sd3", true, nil)
	done := make(chan struct{})
	go func() { b.stop(); close(done) }()
	got := c5.expectClose(15 * time.Second)
	if len(got) != 1 {
		t.Fatalf("v5 got %v, want DISCONNECT 0x8B", types(got))
	}
	if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.ServerShuttingDown {
		t.Fatalf("v5 got %+v, want DISCONNECT 0x8B", got[0])
	}
	if got := c3.expectClose(15 * time.Second); len(got) != 0 {
		t.Fatalf("v3.1.1 got %v", types(got))
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("broker did not stop")
	}
	if st := b.srv.Stats(); st.Connections != 0 || st.Closes["shutdown"] != 2 {
		t.Fatalf("after shutdown: connections %d, shutdown closes %d", st.Connections, st.Closes["shutdown"])
	}
}
