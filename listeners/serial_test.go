package listeners_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

// sensor is the device end of a pseudo-terminal, speaking framed MQTT with
// raw packets so the test controls every byte.
type sensor struct {
	t  *testing.T
	pt *os.File
	fr *framing.Reader
	in chan packet.Packet
}

func newSensor(t *testing.T, pt *os.File) *sensor {
	s := &sensor{t: t, pt: pt, fr: framing.NewReader(pt, framing.DefaultMaxFrame), in: make(chan packet.Packet, 64)}
	return s
}

// readLoop decodes frames from the gateway until the pty closes.
func (s *sensor) readLoop() {
	for {
		b, err := s.fr.ReadFrame()
		if err != nil {
			close(s.in)
			return
		}
		p, _, err := packet.DecodeBytes(b, packet.V311, 0)
		if err != nil {
			s.t.Errorf("sensor: bad packet from gateway: %v", err)
			continue
		}
		s.in <- p
	}
}

func (s *sensor) send(p packet.Packet) {
	s.t.Helper()
	b, err := packet.Append(nil, p, packet.V311)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.pt.Write(framing.AppendFrame(nil, b)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sensor) expect(want packet.Type) packet.Packet {
	s.t.Helper()
	select {
	case p, ok := <-s.in:
		if !ok {
			s.t.Fatalf("link closed waiting for %v", want)
		}
		if p.Type() != want {
			s.t.Fatalf("got %v, want %v", p.Type(), want)
		}
		return p
	case <-time.After(10 * time.Second):
		s.t.Fatalf("timed out waiting for %v", want)
	}
	return nil
}

func (s *sensor) connect(id string) {
	s.t.Helper()
	s.send(&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, CleanStart: true, KeepAlive: 60, ClientID: id,
		Will: &packet.Will{Topic: "sensors/" + id + "/status", Payload: []byte("offline")}})
	if ack := s.expect(packet.CONNACK).(*packet.Connack); ack.ReasonCode != 0 {
		s.t.Fatalf("connack %v", ack.ReasonCode)
	}
}

func TestSerialListener(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	ser := &listeners.Serial{Name: "uart0", Device: pts.Name(), Framing: framing.ModeCOBSCRC16, Log: h.log}
	if err := ser.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ser.Serve(ctx, h.establish); err != nil {
			t.Errorf("serial serve: %v", err)
		}
	}()
	sn := newSensor(t, ptm)
	wg.Add(1)
	go func() { defer wg.Done(); sn.readLoop() }()
	defer func() {
		cancel()
		pts.Close() // with every slave fd closed, the master's blocking read ends (EIO)
		wg.Wait()
		ptm.Close()
	}()
	testutil.Eventually(t, 10*time.Second, "device open", func() bool { return ser.Stats().State == "open" })

	addr := h.tcp(nil, false)
	var got collector
	sub := mustPaho(t, "tcp://"+addr, "dash", nil)
	waitTok(t, sub.Subscribe("sensors/#", 1, got.handle), "subscribe")

	// A sensor publishes over the serial line; a TCP client receives it.
	sn.connect("s1")
	sn.send(&packet.Publish{Topic: "sensors/s1/temp", QoS: 1, PacketID: 7, Payload: []byte("21.5")})
	if ack := sn.expect(packet.PUBACK).(*packet.Puback); ack.PacketID != 7 {
		t.Fatalf("puback id %d", ack.PacketID)
	}
	testutil.Eventually(t, 10*time.Second, "reading at the tcp subscriber", func() bool { return len(got.get()) == 1 })

	// A corrupt frame is dropped and counted; the link carries on.
	b, _ := packet.Append(nil, &packet.Publish{Topic: "sensors/s1/temp", Payload: []byte("99")}, packet.V311)
	frame := framing.AppendFrame(nil, b)
	frame[3] ^= 0x40
	ptm.Write(frame)
	sn.send(&packet.Pingreq{})
	sn.expect(packet.PINGRESP)
	if st := ser.Stats(); st.Frames.BadCRC+st.Frames.BadCOBS != 1 {
		t.Fatalf("frame errors = %+v, want 1", st.Frames)
	}

	// Commands flow the other way.
	sn.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "cmd/s1/#", QoS: 1}}})
	sn.expect(packet.SUBACK)
	waitTok(t, sub.Publish("cmd/s1/led", 1, false, "on"), "publish cmd")
	cmd := sn.expect(packet.PUBLISH).(*packet.Publish)
	if cmd.Topic != "cmd/s1/led" || string(cmd.Payload) != "on" {
		t.Fatalf("command %q %q", cmd.Topic, cmd.Payload)
	}
	sn.send(&packet.Puback{PacketID: cmd.PacketID})

	// The sensor reboots: a new CONNECT without DISCONNECT. The old
	// connection ends abnormally (its will fires) and the new one works.
	sn.connect("s1")
	testutil.Eventually(t, 10*time.Second, "will after reboot", func() bool {
		for _, m := range got.get() {
			if m == "sensors/s1/status=offline" {
				return true
			}
		}
		return false
	})
	sn.send(&packet.Publish{Topic: "sensors/s1/temp", QoS: 1, PacketID: 8, Payload: []byte("22.0")})
	sn.expect(packet.PUBACK)
	testutil.Eventually(t, 10*time.Second, "reading after reboot", func() bool { return len(got.get()) == 3 })
	if st := ser.Stats(); st.Logical != 2 {
		t.Fatalf("logical connections = %d, want 2", st.Logical)
	}

	// After a clean DISCONNECT, frames other than CONNECT are dropped until
	// the sensor connects again.
	sn.send(&packet.Disconnect{})
	sn.send(&packet.Pingreq{})
	sn.connect("s1")
	testutil.Eventually(t, 5*time.Second, "skipped frame counted", func() bool { return ser.Stats().Skipped == 1 })
}
