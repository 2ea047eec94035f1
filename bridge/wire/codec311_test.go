package wire_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway/packet"
)

// hotPackets are the packets of every message and keepalive, as the
// uplink sends and receives them.
func hotPackets() []packet.Packet {
	return []packet.Packet{
		&packet.Publish{Topic: "site-a/sensors/t1", Payload: []byte("21.5")},
		&packet.Publish{Topic: "s", QoS: 1, PacketID: 1, Payload: bytes.Repeat([]byte{7}, 100)},
		&packet.Publish{Topic: "s/é", QoS: 2, PacketID: 65535, Dup: true, Retain: true, Payload: bytes.Repeat([]byte{1}, 200)},
		&packet.Publish{Topic: strings.Repeat("t", 300), QoS: 1, PacketID: 4242, Payload: bytes.Repeat([]byte{2}, 20000)},
		&packet.Puback{PacketID: 1},
		&packet.Pubrec{PacketID: 300},
		&packet.Pubrel{PacketID: 65535},
		&packet.Pubcomp{PacketID: 7},
		&packet.Pingreq{},
	}
}

// paho311 is p as paho's packets build it.
func paho311(t *testing.T, p packet.Packet) packets.ControlPacket {
	switch p := p.(type) {
	case *packet.Publish:
		c := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		c.Dup, c.Qos, c.Retain = p.Dup, p.QoS, p.Retain
		c.TopicName, c.MessageID, c.Payload = p.Topic, p.PacketID, p.Payload
		return c
	case *packet.Puback:
		c := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubrec:
		c := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubrel:
		c := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubcomp:
		c := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pingreq:
		return packets.NewControlPacket(packets.Pingreq)
	case *packet.Pingresp:
		return packets.NewControlPacket(packets.Pingresp)
	}
	t.Fatalf("no paho packet for %T", p)
	return nil
}

// TestCodec311HotPacketsAsPaho: Codec311 writes the packets of every
// message byte for byte as paho's packets do, and reads what paho writes
// back into the packet it was built from.
func TestCodec311HotPacketsAsPaho(t *testing.T) {
	var c wire.Codec311
	for _, p := range append(hotPackets(), &packet.Pingresp{}) {
		var want bytes.Buffer
		if err := paho311(t, p).Write(&want); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.(*packet.Pingresp); !ok { // the uplink never sends one
			got, err := c.Append(nil, p)
			if err != nil {
				t.Fatalf("%s: %v", p.Type(), err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("%s: encoded\n%x\npaho\n%x", p.Type(), got, want.Bytes())
			}
		}
		back, err := c.Decode(bufio.NewReader(bytes.NewReader(want.Bytes())), 0)
		if err != nil {
			t.Fatalf("%s: decode paho's bytes: %v", p.Type(), err)
		}
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("%s: decoded %#v, want %#v", p.Type(), back, p)
		}
	}
}

// TestCodec311MessageAllocations: a PUBLISH is encoded into the wire's
// buffer without an allocation, and an acknowledgement is read with at
// most two (the packet and its 2-byte body); paho's packets took six for
// the one and four for the other, the bridge's largest share of garbage
// per reading.
func TestCodec311MessageAllocations(t *testing.T) {
	var c wire.Codec311
	pub := &packet.Publish{Topic: "site-a/sensors/t1", QoS: 1, PacketID: 9, Payload: make([]byte, 100)}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = c.Append(buf[:0], pub); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("encoding a PUBLISH: %.1f allocations, want 0", n)
	}
	ack := []byte{0x40, 2, 0, 9}
	br := bytes.NewReader(ack)
	r := bufio.NewReader(br)
	if n := testing.AllocsPerRun(100, func() {
		br.Reset(ack)
		r.Reset(br)
		if _, err := c.Decode(r, 0); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Fatalf("decoding a PUBACK: %.1f allocations, want at most 2", n)
	}
}

// TestCodec311SizeLimit: a PUBLISH larger than the limit is refused from
// its fixed header, before its body is read (or allocated).
func TestCodec311SizeLimit(t *testing.T) {
	var c wire.Codec311
	// A fixed header claiming a 1 MiB body, and nothing after it.
	hdr := []byte{0x30, 0x80, 0x80, 0x40}
	_, err := c.Decode(bufio.NewReader(bytes.NewReader(hdr)), 64<<10)
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// An unexpected EOF: it tried to read the body.
		t.Fatalf("a 1 MiB PUBLISH against a 64 KiB limit: %v, want it refused", err)
	}
}
