package gateway_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/internal/testutil"
)

// stateRun is one run of a broker on the state in a directory, stopped
// the way SIGTERM stops edgegw: the serving context is cancelled, then
// the store is closed (its final flush).
type stateRun struct {
	*broker
	stopOnce sync.Once
	st       *store.Store
}

func startStateRun(t *testing.T, dir string, opts gateway.Options) *stateRun {
	t.Helper()
	st, loaded, err := store.Open(store.Options{Dir: dir, Sync: store.SyncBatch, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = st
	opts.AllowAnonymous = true
	r := &stateRun{broker: startBroker(t, opts), st: st}
	r.srv.Restore(loaded)
	t.Cleanup(r.shutdown)
	return r
}

func (r *stateRun) shutdown() {
	r.stopOnce.Do(func() {
		r.stop()
		r.st.Close()
	})
}

// qos2Device is a persistent QoS 2 subscriber on cmd/# that acknowledges
// by hand, so the test decides which stage each flow is in at a stop.
func qos2Device(t *testing.T, addr string, v packet.Version, fresh bool) *rawClient {
	t.Helper()
	rc, _ := rawConnect(t, addr, v, "device", false, func(cp *packet.Connect) {
		if v == packet.V5 {
			cp.Props.SessionExpiry = 3600
			cp.Props.Set(packet.PropSessionExpiry)
		}
	})
	if fresh {
		rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "cmd/#", QoS: 2})
	}
	return rc
}

// command routes one QoS 2 command as a bridge does (Server.Publish
// returns once its records are kept).
func command(t *testing.T, srv *gateway.Server, payload string) {
	t.Helper()
	if err := srv.Publish(&gateway.Message{Topic: "cmd/x", QoS: 2, Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
}

// complete runs the rest of a QoS 2 flow whose PUBLISH arrived.
func complete(t *testing.T, rc *rawClient, id uint16) {
	t.Helper()
	rc.send(&packet.Pubrec{PacketID: id})
	if rel := expect[*packet.Pubrel](t, rc, 5*time.Second); rel.PacketID != id {
		t.Fatalf("PUBREL %d, want %d", rel.PacketID, id)
	}
	rc.send(&packet.Pubcomp{PacketID: id})
}

// TestStopMidQoS2Flow: a persistent QoS 2 subscriber has a flow at each
// stage when the broker stops (SIGTERM: the serving context cancelled, the
// store closed) and starts again on the same state. The flow goes on
// where it stood under its packet id [MQTT-4.4.0-1], and no new message
// takes an id the subscriber held before the stop:
//
//   - publish: the PUBLISH went out and the subscriber stays silent until
//     the stop is over: it gets the PUBLISH again, DUP, same id.
//   - pubrec-during-stop: the subscriber's PUBREC comes while the broker
//     stops. The stop waits for it (docs/behaviour.md, "Stopping"), sends
//     the PUBREL and waits for its PUBCOMP, and keeps both: the restart
//     sends neither the PUBLISH nor the PUBREL. Resending the PUBLISH
//     made libmosquitto (mosquitto_sub) queue it twice under one id,
//     deliver it twice and lose the next message sent under that id; a
//     close right behind the PUBREL made its PUBCOMP write fail, and
//     libmosquitto then dropped the message. Nothing new goes out while
//     the broker stops.
//   - pubrel: PUBREC came, the PUBREL went out, the PUBCOMP is held past
//     the grace: the restart sends the PUBREL again, and a new message
//     meanwhile takes another id.
func TestStopMidQoS2Flow(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		for _, stage := range []string{"publish", "pubrec-during-stop", "pubrel"} {
			t.Run(fmt.Sprintf("v%d/%s", v, stage), func(t *testing.T) {
				stopMidQoS2Flow(t, v, stage)
			})
		}
	}
}

func stopMidQoS2Flow(t *testing.T, v packet.Version, stage string) {
	dir := t.TempDir()
	// The stops of the publish and pubrel stages wait out the grace for an
	// ack that never comes; the other stage ends the wait by events, and a
	// grace of a minute keeps a slow machine from ending it first.
	grace := time.Minute
	if stage == "publish" || stage == "pubrel" {
		grace = 50 * time.Millisecond
	}
	r1 := startStateRun(t, dir, gateway.Options{ShutdownGrace: grace})
	dev := qos2Device(t, r1.addr, v, true)
	used := map[uint16]bool{} // ids the device saw before the stop
	for i := range 3 {
		command(t, r1.srv, fmt.Sprint(i))
		p := dev.nextPublish(5 * time.Second)
		used[p.PacketID] = true
		complete(t, dev, p.PacketID)
	}
	command(t, r1.srv, "open")
	p := dev.nextPublish(5 * time.Second)
	x := p.PacketID
	used[x] = true

	switch stage {
	case "publish":
		r1.shutdown()
	case "pubrec-during-stop":
		stopped := make(chan struct{})
		go func() { defer close(stopped); r1.shutdown() }()
		testutil.Eventually(t, 10*time.Second, "the stop begins", func() bool { return gateway.Draining(r1.srv, "device") })
		command(t, r1.srv, "late") // queued while the broker stops: not sent now
		dev.send(&packet.Pubrec{PacketID: x})
		if rel := expect[*packet.Pubrel](t, dev, 30*time.Second); rel.PacketID != x {
			t.Fatalf("during the stop PUBREL %d, want %d", rel.PacketID, x)
		}
		dev.send(&packet.Pubcomp{PacketID: x})
		got := dev.expectClose(30 * time.Second)
		var want []string
		if v == packet.V5 {
			want = append(want, "*packet.Disconnect")
		}
		if fmt.Sprint(types(got)) != fmt.Sprint(want) {
			t.Fatalf("during the stop the device got %v, want %v", types(got), want)
		}
		<-stopped
	case "pubrel":
		dev.send(&packet.Pubrec{PacketID: x})
		expect[*packet.Pubrel](t, dev, 5*time.Second)
		r1.shutdown()
	}
	dev.close()

	r2 := startStateRun(t, dir, gateway.Options{ShutdownGrace: grace})
	dev = qos2Device(t, r2.addr, v, false)
	switch stage {
	case "publish":
		p := dev.nextPublish(5 * time.Second)
		if p.PacketID != x || !p.Dup || string(p.Payload) != "open" {
			t.Fatalf("after the restart got PUBLISH id %d dup %v %q, want id %d dup \"open\"", p.PacketID, p.Dup, p.Payload, x)
		}
		complete(t, dev, x)
	case "pubrec-during-stop":
		// The flow was complete before the close: the first packet is the
		// message queued during the stop (a PUBREL here would be one the
		// close had overtaken). The device holds no id any more, so ids
		// may start again, as after a stop with nothing in flight.
		p := expect[*packet.Publish](t, dev, 5*time.Second)
		clear(used)
		if string(p.Payload) != "late" || used[p.PacketID] {
			t.Fatalf("after the restart got %q under id %d (ids held before the stop: %v)", p.Payload, p.PacketID, used)
		}
		used[p.PacketID] = true
		complete(t, dev, p.PacketID)
	case "pubrel":
		rel := expect[*packet.Pubrel](t, dev, 5*time.Second)
		if rel.PacketID != x {
			t.Fatalf("after the restart PUBREL %d, want %d", rel.PacketID, x)
		}
		command(t, r2.srv, "meanwhile")
		p := dev.nextPublish(5 * time.Second)
		if string(p.Payload) != "meanwhile" || p.PacketID == x {
			t.Fatalf("while %d waits for PUBCOMP got %q under id %d", x, p.Payload, p.PacketID)
		}
		dev.send(&packet.Pubcomp{PacketID: x})
		used[p.PacketID] = true
		complete(t, dev, p.PacketID)
	}
	// New messages go on with new ids, as across a reconnect: none takes
	// an id the device used before the stop.
	for i := range 5 {
		command(t, r2.srv, fmt.Sprint("after-", i))
		p := dev.nextPublish(5 * time.Second)
		if string(p.Payload) != fmt.Sprint("after-", i) || used[p.PacketID] {
			t.Fatalf("after the restart got %q under id %d (ids used before the stop: %v)", p.Payload, p.PacketID, used)
		}
		complete(t, dev, p.PacketID)
	}
}
