package listeners_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

var serialModes = []framing.Mode{framing.ModeCOBSCRC16, framing.ModeRaw}

// TestSerialListener: a sensor's ordinary life on a framed serial link. It
// publishes to a TCP subscriber; a corrupt frame is dropped and counted and
// the link carries on; commands flow the other way; a reboot (CONNECT
// without DISCONNECT) ends the old connection abnormally (its will fires);
// after a clean DISCONNECT, frames other than CONNECT are dropped until the
// sensor connects again.
func TestSerialListener(t *testing.T) {
	r, d := startSerialRig(t, framing.ModeCOBSCRC16)
	d.connect("s1", packet.V311, 60)
	r.deliver(d, "sensors/s1/temp", "21.5", 1, 7)

	frame := d.encode(&packet.Publish{Topic: "sensors/s1/temp", Payload: []byte("bad-99")})
	frame[3] ^= 0x40
	d.write(frame)
	d.ping()
	if st := r.ser.Stats(); st.Frames.BadCRC+st.Frames.BadCOBS != 1 {
		t.Fatalf("frame errors = %+v, want 1", st.Frames)
	}

	d.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "cmd/s1/#", QoS: 1}}})
	d.expect(packet.SUBACK)
	waitTok(t, r.dash.Publish("cmd/s1/led", 1, false, "on"), "publish cmd")
	cmd := d.expect(packet.PUBLISH).(*packet.Publish)
	if cmd.Topic != "cmd/s1/led" || string(cmd.Payload) != "on" {
		t.Fatalf("command %q %q", cmd.Topic, cmd.Payload)
	}
	d.send(&packet.Puback{PacketID: cmd.PacketID})

	d.connect("s1", packet.V311, 60)
	r.waitMsg("sensors/s1/status=offline@0")
	r.deliver(d, "sensors/s1/temp", "22.0", 1, 8)
	if st := r.ser.Stats(); st.Logical != 2 {
		t.Fatalf("logical connections = %d, want 2", st.Logical)
	}

	d.send(&packet.Disconnect{})
	d.send(&packet.Pingreq{})
	d.connect("s1", packet.V311, 60) // CONNACK comes first: no PINGRESP was sent
	if st := r.ser.Stats(); st.Skipped != 1 {
		t.Fatalf("skipped frames = %d, want 1", st.Skipped)
	}
	if strings.Contains(r.got.String(), "bad-") {
		t.Fatalf("a corrupt frame was delivered: %s", &r.got)
	}
}

// TestSerialQoS runs QoS 0, 1 and 2 both ways between a sensor on a serial
// link and a TCP client: sensor → TCP subscriber, TCP publisher → sensor.
func TestSerialQoS(t *testing.T) {
	cases := []struct {
		dir string // "up": sensor publishes; "down": the TCP client does
		qos byte
	}{{"up", 0}, {"up", 1}, {"up", 2}, {"down", 0}, {"down", 1}, {"down", 2}}
	for _, mode := range serialModes {
		t.Run(mode.String(), func(t *testing.T) {
			r, d := startSerialRig(t, mode)
			d.connect("q1", packet.V311, 60)
			d.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "cmd/q1/#", QoS: 2}}})
			if ack := d.expect(packet.SUBACK).(*packet.Suback); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 2 {
				t.Fatalf("suback %+v", ack)
			}
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/qos%d", tc.dir, tc.qos), func(t *testing.T) {
					d.t = t
					defer func() { d.t = r.t }()
					payload := fmt.Sprintf("%s-%s-%d", mode, tc.dir, tc.qos)
					if tc.dir == "up" {
						d.publish("sensors/q1/temp", payload, tc.qos, uint16(10+tc.qos))
						r.waitMsg(fmt.Sprintf("sensors/q1/temp=%s@%d", payload, tc.qos))
						return
					}
					waitTok(t, r.dash.Publish("cmd/q1/led", tc.qos, false, payload), "publish command")
					p := d.expect(packet.PUBLISH).(*packet.Publish)
					if p.Topic != "cmd/q1/led" || string(p.Payload) != payload || p.QoS != tc.qos {
						t.Fatalf("command %q %q qos %d, want %q qos %d", p.Topic, p.Payload, p.QoS, payload, tc.qos)
					}
					switch tc.qos {
					case 1:
						d.send(&packet.Puback{PacketID: p.PacketID})
					case 2:
						d.send(&packet.Pubrec{PacketID: p.PacketID})
						if rel := d.expect(packet.PUBREL).(*packet.Pubrel); rel.PacketID != p.PacketID {
							t.Fatalf("pubrel id %d, want %d", rel.PacketID, p.PacketID)
						}
						d.send(&packet.Pubcomp{PacketID: p.PacketID})
					}
					d.ping() // nothing else (no retransmission) comes first
				})
			}
			// A QoS 2 PUBLISH retransmitted before PUBREL (its PUBREC was
			// "lost") is delivered once.
			t.Run("up/qos2-dup", func(t *testing.T) {
				d.t = t
				defer func() { d.t = r.t }()
				pub := &packet.Publish{Topic: "sensors/q1/temp", QoS: 2, PacketID: 30, Payload: []byte("once")}
				d.send(pub)
				d.expect(packet.PUBREC)
				pub.Dup = true
				d.send(pub)
				d.expect(packet.PUBREC)
				d.send(&packet.Pubrel{PacketID: 30})
				d.expect(packet.PUBCOMP)
				r.deliver(d, "sensors/q1/temp", "marker", 1, 31)
				if n := r.got.count("sensors/q1/temp=once@2"); n != 1 {
					t.Fatalf("qos 2 message delivered %d times: %s", n, &r.got)
				}
			})
		})
	}
}

// TestSerialCorruptFrames: garbage at boot, bit flips, short and truncated
// frames are dropped and counted, and the link keeps working.
func TestSerialCorruptFrames(t *testing.T) {
	r, d := startSerialRig(t, framing.ModeCOBSCRC16)

	var want framing.Stats // drops expected so far
	junk := func(what string, b []byte) {
		t.Helper()
		st := frameStats(b)
		if st.Good != 0 || st.Dropped() == 0 {
			t.Fatalf("%s: test input is not garbage: %+v", what, st)
		}
		want.BadCRC += st.BadCRC
		want.BadCOBS += st.BadCOBS
		want.Short += st.Short
		want.Oversize += st.Oversize
		d.write(b)
	}
	check := func(what string) {
		t.Helper()
		w := want
		w.Good = d.sent.Load()
		if got := r.ser.Stats().Frames; got != w {
			t.Fatalf("%s: frame counters %+v, want %+v", what, got, w)
		}
	}

	// Boot messages and line noise, then the recommended 0x00, then CONNECT.
	rng := rand.New(rand.NewPCG(7, 11))
	boot := []byte("\r\nESP-ROM:esp32s3-20210327\r\nrst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)\r\n")
	for range 600 {
		boot = append(boot, byte(rng.Uint32()))
	}
	junk("boot", append(boot, 0))
	d.connect("c1", packet.V311, 60)
	r.deliver(d, "sensors/c1/temp", "boot-ok", 1, 1)
	check("after boot garbage")

	// Single bit flips: COBS code byte, fixed header, topic, payload, CRC.
	for i, pos := range []int{0, 1, 2, 6, 20, -4, -2, -1} {
		b := d.encode(&packet.Publish{Topic: "sensors/c1/temp", Payload: fmt.Appendf(nil, "bad-flip%d", i)})
		if pos < 0 {
			pos += len(b) - 1 // from the delimiter, which stays
		}
		b[pos] ^= 1 << (i % 8)
		junk(fmt.Sprintf("flip %d", i), b)
	}
	junk("short", []byte{0x02, 0x10, 0x00, 0x01, 0x00})
	r.deliver(d, "sensors/c1/temp", "after-flips", 1, 2)
	check("after bit flips")

	// A frame cut short (the sensor reset mid-frame), the 0x00 it sends at
	// boot, then a good frame: only the cut one is lost.
	cut := d.encode(&packet.Publish{Topic: "sensors/c1/temp", QoS: 1, PacketID: 3, Payload: []byte("bad-cut1")})
	junk("cut + 0x00", append(cut[:len(cut)/2:len(cut)/2], 0))
	r.deliver(d, "sensors/c1/temp", "after-cut1", 1, 4)
	check("after a cut frame")

	// Cut short with no 0x00 after it: the next frame is absorbed into the
	// bad one (resynchronisation is at the next 0x00) and the one after it
	// is read. PUBACK 6 must never come; publish expects PUBACK 7 next.
	cut = d.encode(&packet.Publish{Topic: "sensors/c1/temp", QoS: 1, PacketID: 5, Payload: []byte("bad-cut2")})
	lost := d.encode(&packet.Publish{Topic: "sensors/c1/temp", QoS: 1, PacketID: 6, Payload: []byte("bad-lost")})
	junk("cut + frame", append(cut[:len(cut)/2:len(cut)/2], lost...))
	r.deliver(d, "sensors/c1/temp", "after-cut2", 1, 7)
	check("after a cut frame merged with the next")

	if s := r.got.String(); strings.Contains(s, "bad-") {
		t.Fatalf("a corrupt frame was delivered: %s", s)
	}
	if st := r.ser.Stats(); st.Logical != 1 || st.Opens != 1 || st.Skipped != 0 {
		t.Fatalf("stats %+v: corrupt frames must not end the connection", st)
	}
}

// TestSerialConnectSplit: a CONNECT on a link that has a connection ends the
// previous one abnormally (its will fires) and starts a new one, whatever
// the protocol levels (a firmware update may change it).
func TestSerialConnectSplit(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second packet.Version
	}{
		{"v5", packet.V5, packet.V5},
		{"v311-then-v5", packet.V311, packet.V5},
		{"v5-then-v311", packet.V5, packet.V311},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, d := startSerialRig(t, framing.ModeCOBSCRC16)
			d.connect("m1", tc.first, 60)
			r.deliver(d, "sensors/m1/temp", "before", 1, 1)

			d.connect("m1", tc.second, 60) // CONNACK, not a DISCONNECT of the old one, comes first
			r.waitMsg("sensors/m1/status=offline@0")
			r.deliver(d, "sensors/m1/temp", "after", 1, 2)
			if n := r.got.count("sensors/m1/status=offline@0"); n != 1 {
				t.Fatalf("will published %d times", n)
			}
			if st := r.ser.Stats(); st.Logical != 2 || st.Opens != 1 {
				t.Fatalf("stats %+v, want 2 logical connections on 1 open", st)
			}
		})
	}
}

// TestSerialKeepAlive: a sensor with keepalive 1 s that goes silent is
// closed by the gateway after 1.5 s (its will fires); a later CONNECT on the
// same link works.
func TestSerialKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		mode framing.Mode
		ver  packet.Version
	}{
		{framing.ModeCOBSCRC16, packet.V311},
		{framing.ModeCOBSCRC16, packet.V5},
		{framing.ModeRaw, packet.V311},
	} {
		t.Run(fmt.Sprintf("%s/v%d", tc.mode, tc.ver), func(t *testing.T) {
			t.Parallel() // mostly waiting for the keepalive
			r, d := startSerialRig(t, tc.mode)
			d.connect("k1", tc.ver, 1)
			start := time.Now()
			r.waitMsg("sensors/k1/status=offline@0")
			if el := time.Since(start); el < 1200*time.Millisecond {
				t.Fatalf("closed after %s; keepalive 1 s allows 1.5 s", el)
			}
			if tc.ver == packet.V5 {
				if dis := d.expect(packet.DISCONNECT).(*packet.Disconnect); dis.ReasonCode != packet.KeepAliveTimeout {
					t.Fatalf("disconnect reason %v, want keepalive timeout", dis.ReasonCode)
				}
			}
			if tc.mode == framing.ModeRaw {
				r.waitOpen(2) // raw: the device is reopened after each connection
			} else {
				d.send(&packet.Pingreq{}) // no connection: dropped
				testutil.Eventually(t, serialWait, "PINGREQ skipped", func() bool { return r.ser.Stats().Skipped == 1 })
			}
			d.connect("k1", tc.ver, 60) // CONNACK comes first: no PINGRESP was sent
			r.deliver(d, "sensors/k1/temp", "back", 1, 1)
			if n := r.got.count("sensors/k1/status=offline@0"); n != 1 {
				t.Fatalf("will published %d times", n)
			}
		})
	}
}

// TestSerialRawReopen: with raw framing the device is reopened after a
// logical connection ends, and the sensor can connect again.
func TestSerialRawReopen(t *testing.T) {
	r, d := startSerialRig(t, framing.ModeRaw)
	d.connect("r1", packet.V311, 60)
	r.deliver(d, "sensors/r1/temp", "one", 1, 1)
	d.send(&packet.Disconnect{})
	r.waitOpen(2)
	d.connect("r1", packet.V311, 60)
	r.deliver(d, "sensors/r1/temp", "two", 2, 2)
	if n := r.got.count("sensors/r1/status=offline@0"); n != 0 {
		t.Fatalf("will published after a clean DISCONNECT")
	}
	if st := r.ser.Stats(); st.Logical != 2 || st.Reopens != 1 || st.Lost != 0 {
		t.Fatalf("stats %+v, want 2 logical connections, 1 reopen, nothing lost", st)
	}
}

// TestSerialUnplug: the device path is a symlink to a pty; unplugging
// removes both, replugging creates a new pty at the same path. The gateway
// keeps running and the sensor works again.
func TestSerialUnplug(t *testing.T) {
	for _, mode := range serialModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			r, d := startSerialRig(t, mode)
			d.connect("u1", packet.V311, 60)
			r.deliver(d, "sensors/u1/temp", "before", 1, 1)

			d.unplug()
			r.waitMsg("sensors/u1/status=offline@0") // the connection was closed abnormally
			testutil.Eventually(t, serialWait, "link waiting after a failed reopen", func() bool {
				st := r.ser.Stats()
				return st.State == "waiting" && st.Lost == 1 && st.Failures >= 1
			})

			d = r.plug()
			r.waitOpen(2)
			d.connect("u1", packet.V311, 60)
			r.deliver(d, "sensors/u1/temp", "after", 1, 2)
		})
	}
	t.Run("missing-at-start", func(t *testing.T) {
		t.Parallel()
		r := newSerialRig(t, framing.ModeCOBSCRC16)
		r.start()
		testutil.Eventually(t, serialWait, "link waiting for the device", func() bool {
			st := r.ser.Stats()
			return st.State == "waiting" && st.Failures >= 1
		})
		d := r.plug()
		r.waitOpen(1)
		d.connect("u2", packet.V311, 60)
		r.deliver(d, "sensors/u2/temp", "hello", 1, 1)
	})
}

// TestSerialProtocolError: the gateway ends a logical connection on a
// protocol error (its will fires); the frames after it, other than CONNECT,
// are dropped, whatever they hold, until the sensor connects again. The bad
// packet is refused at its first byte, so the gateway reads no more of it;
// the rest of it (starting 0x10, a CONNECT's first byte) must not be taken
// for a CONNECT.
func TestSerialProtocolError(t *testing.T) {
	r, d := startSerialRig(t, framing.ModeCOBSCRC16)
	d.connect("p1", packet.V311, 60)
	bad := append([]byte{0x36, 0x10}, "\x7f\x00\x04MQTT\x04\x02\x00\x3c\x00\x02p2"...) // PUBLISH with QoS 3
	d.write(framing.AppendFrame(nil, bad))
	d.sent.Add(1)
	r.waitMsg("sensors/p1/status=offline@0")
	d.send(&packet.Publish{Topic: "sensors/p1/temp", Payload: []byte("bad-ignored")})
	testutil.Eventually(t, serialWait, "PUBLISH skipped", func() bool { return r.ser.Stats().Skipped == 1 })
	d.connect("p1", packet.V311, 60)
	r.deliver(d, "sensors/p1/temp", "after", 1, 1)
	if st := r.ser.Stats(); st.Logical != 2 || st.Skipped != 1 || st.Frames.Good != d.sent.Load() {
		t.Fatalf("stats %+v, want 2 logical connections and 1 skipped frame", st)
	}
	if strings.Contains(r.got.String(), "bad-") {
		t.Fatalf("a packet sent without a connection was delivered: %s", &r.got)
	}
}
