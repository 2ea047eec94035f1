package bridge

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// rewritten is what an ackRewriter should make of a stream.
type rewritten struct {
	out     []byte
	pubrecs []spool.ID
}

// packetStream encodes a random sequence of packets a broker sends a
// client (with paho's encoder, so the lengths are real), and the expected
// rewrite: acks for records 1..known get paho's id 1000+rec, others are
// dropped; a SUBACK or UNSUBACK answers a request it registers in st
// (requestid.go) and gets paho's id, or answers none (an id above 40000)
// and gets id 0; answers too short to hold an id pass as read.
func packetStream(r *rand.Rand, st *uplinkStore, n, known int) ([]byte, rewritten) {
	var buf bytes.Buffer
	var want rewritten
	ack := func(typ byte) packets.ControlPacket {
		rec := spool.ID(1 + r.IntN(known+20))
		id := wireID(rec)
		var p packets.ControlPacket
		switch typ {
		case packets.Puback:
			p = &packets.PubackPacket{FixedHeader: packets.FixedHeader{MessageType: typ}, MessageID: id}
		case packets.Pubrec:
			p = &packets.PubrecPacket{FixedHeader: packets.FixedHeader{MessageType: typ}, MessageID: id}
		default:
			p = &packets.PubcompPacket{FixedHeader: packets.FixedHeader{MessageType: typ}, MessageID: id}
		}
		if rec <= spool.ID(known) {
			want.out = append(want.out, typ<<4, 2, byte((1000+rec)>>8), byte(1000+rec))
			if typ == packets.Pubrec {
				want.pubrecs = append(want.pubrecs, rec)
			}
		}
		return p
	}
	answer := func(typ byte) packets.ControlPacket {
		id := uint16(40000 + r.IntN(20000)) // no request's
		pid := uint16(1 + r.IntN(65535))
		if r.IntN(2) == 0 {
			id = st.requestWire(pid)
		}
		var p packets.ControlPacket
		if typ == packets.Suback {
			// Up to 300 return codes: 1- and 2-byte remaining lengths.
			p = &packets.SubackPacket{FixedHeader: packets.FixedHeader{MessageType: typ}, MessageID: id,
				ReturnCodes: bytes.Repeat([]byte{0, 1, 2, 0x80}, 1+r.IntN(75))}
		} else {
			p = &packets.UnsubackPacket{FixedHeader: packets.FixedHeader{MessageType: typ}, MessageID: id}
		}
		var b bytes.Buffer
		if err := p.Write(&b); err != nil {
			panic(err)
		}
		_, hl := remainingLength(b.Bytes())
		if id >= 40000 { // no request's: paho gets id 0, no token's
			pid = 0
		}
		b.Bytes()[hl], b.Bytes()[hl+1] = byte(pid>>8), byte(pid)
		want.out = append(want.out, b.Bytes()...)
		return p
	}
	for range n {
		var p packets.ControlPacket
		switch r.IntN(9) {
		case 0:
			pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			pub.Qos = byte(r.IntN(3))
			pub.TopicName = "t/" + string(rune('a'+r.IntN(26)))
			if pub.Qos > 0 {
				pub.MessageID = uint16(r.IntN(65535) + 1)
			}
			// Payloads long enough for 1- to 3-byte remaining lengths,
			// and bytes that look like PUBREC headers.
			pub.Payload = bytes.Repeat([]byte{0x50, 0x02}, r.IntN(20000))
			p = pub
		case 1:
			p = ack(packets.Pubrec)
		case 2:
			p = ack(packets.Puback)
		case 3:
			p = ack(packets.Pubcomp)
		case 4:
			p = packets.NewControlPacket(packets.Pingresp)
		case 5:
			p = answer(packets.Suback)
		case 6:
			p = answer(packets.Unsuback)
		case 7, 8: // too short to hold an id (remaining length 0 or 1)
			typ := byte(typeSuback)
			if r.IntN(2) == 0 {
				typ = typeUnsuback
			}
			short := []byte{typ << 4, byte(r.IntN(2)), 0x01}[:2+r.IntN(2)]
			short[1] = byte(len(short) - 2)
			buf.Write(short)
			want.out = append(want.out, short...)
			continue
		}
		mark := buf.Len()
		if err := p.Write(&buf); err != nil {
			panic(err)
		}
		if t := buf.Bytes()[mark] >> 4; t == typePublish || t == packets.Pingresp {
			want.out = append(want.out, buf.Bytes()[mark:]...)
		}
	}
	return buf.Bytes(), want
}

// testStore is a store holding records 1..n, as paho would after
// publishing them under paho ids 1000+rec.
func testStore(n int) *uplinkStore {
	st := newUplinkStore(func(spool.ID) {})
	for rec := spool.ID(1); rec <= spool.ID(n); rec++ {
		e := st.announce(rec, wireID(rec))
		st.Put("o."+strconv.Itoa(1000+int(rec)), publishPacket(uint16(1000+rec), 2))
		st.taken(e)
	}
	return st
}

// TestAckRewriter feeds random broker streams in random read sizes (as the
// network delivers them) and checks that the output is the input with
// every ack's wire id replaced by paho's id, acks of unknown ids removed,
// and every PUBREC recorded.
func TestAckRewriter(t *testing.T) {
	const known = 100
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		st := testStore(known)
		stream, want := packetStream(r, st, 1+r.IntN(40), known)
		rw := ackRewriter{st: st}
		var got []byte
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(3000))
			if r.IntN(4) == 0 {
				n = 1
			}
			got = rw.filter(rest[:n], got)
			rest = rest[n:]
		}
		if !bytes.Equal(got, want.out) {
			t.Fatalf("round %d: output differs from the expected rewrite (%d vs %d bytes)", round, len(got), len(want.out))
		}
		if rw.state != scanHeader || rw.nhold != 0 {
			t.Fatalf("round %d: not at a packet boundary after a whole stream", round)
		}
		if len(st.reqs) != 0 {
			t.Fatalf("round %d: %d requests still held after their answers", round, len(st.reqs))
		}
		for _, rec := range want.pubrecs {
			if _, ok := st.Get("o." + strconv.Itoa(1000+int(rec))).(*packets.PubrelPacket); !ok {
				t.Fatalf("round %d: PUBREC for record %d not recorded", round, rec)
			}
		}
	}
}

// TestRewriteOutgoing checks PUBLISH and PUBREL get the wire id, and that
// other packets, unknown ids and partial writes pass unchanged
// (SUBSCRIBE and UNSUBSCRIBE: requestid_internal_test.go).
func TestRewriteOutgoing(t *testing.T) {
	st := testStore(3)
	enc := func(p packets.ControlPacket) []byte {
		var b bytes.Buffer
		if err := p.Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	pub := publishPacket(1002, 2)
	pub.Payload = bytes.Repeat([]byte("x"), 300) // a 2-byte remaining length
	b := enc(pub)
	rewriteOutgoing(st, b)
	got, err := packets.ReadPacket(bytes.NewReader(b))
	if err != nil || got.(*packets.PublishPacket).MessageID != wireID(2) || len(got.(*packets.PublishPacket).Payload) != 300 {
		t.Fatalf("PUBLISH rewritten to %v (%v), want id %d", got, err, wireID(2))
	}
	rel := &packets.PubrelPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pubrel, Qos: 1}, MessageID: 1003}
	b = enc(rel)
	rewriteOutgoing(st, b)
	if got, _ := packets.ReadPacket(bytes.NewReader(b)); got.(*packets.PubrelPacket).MessageID != wireID(3) {
		t.Fatalf("PUBREL rewritten to %v, want id %d", got, wireID(3))
	}
	for _, p := range []packets.ControlPacket{
		publishPacket(7, 2), // unknown to the store
		&packets.PubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Puback}, MessageID: 1001},
	} {
		b := enc(p)
		orig := bytes.Clone(b)
		rewriteOutgoing(st, b)
		if !bytes.Equal(b, orig) {
			t.Errorf("%T changed", p)
		}
	}
	b = enc(publishPacket(1001, 1))
	orig := bytes.Clone(b)
	rewriteOutgoing(st, b[:len(b)-1]) // not a whole packet
	if !bytes.Equal(b, orig) {
		t.Error("a partial PUBLISH was rewritten")
	}
}

// FuzzAckRewriter checks that no input makes the rewriter panic or loop,
// that it never invents bytes, and that a well-formed ack, and a SUBACK
// of a request still held, after any prefix that ends on a packet
// boundary are rewritten.
func FuzzAckRewriter(f *testing.F) {
	f.Add([]byte{0x50, 0x02, 0x00, 0x01})
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x50})
	f.Add([]byte{0x40, 0x03, 0x00, 0x01, 0x00})
	f.Add([]byte{0x90, 0x03, 0x00, 0x03, 0x01, 0x90, 0x01, 0x00, 0xb0, 0x00})
	f.Add([]byte{0x90, 0x81, 0x01, 0x00, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		st := testStore(2)
		req := st.requestWire(900) // wire id 3: a SUBSCRIBE's
		rw := ackRewriter{st: st}
		out := rw.filter(b, nil)
		if len(out) > len(b) {
			t.Fatalf("%d bytes out of %d in", len(out), len(b))
		}
		if rw.state == scanHeader && rw.nhold == 0 {
			w := wireID(1)
			got := rw.filter([]byte{0x40, 0x02, byte(w >> 8), byte(w)}, nil)
			if !bytes.Equal(got, []byte{0x40, 0x02, 1001 >> 8, 1001 & 0xff}) {
				t.Fatalf("PUBACK on a packet boundary became % x", got)
			}
			if st.reqs[req] == nil {
				return // b answered the SUBSCRIBE itself
			}
			got = rw.filter([]byte{0x90, 0x03, byte(req >> 8), byte(req), 0x01}, nil)
			if !bytes.Equal(got, []byte{0x90, 0x03, 900 >> 8, 900 & 0xff, 0x01}) {
				t.Fatalf("SUBACK on a packet boundary became % x", got)
			}
		}
	})
}

// TestPickWireIDAcrossTheWrap: records 65535 apart share a wire id, and
// with lanes or live-first both can be in flight (a live record and a
// backlog record 65535 older). A QoS 1 publish then takes a free id at
// once; a QoS 2 publish waits for its own (a restarted process must find
// an unfinished QoS 2 flow under the id its predecessor used).
func TestPickWireIDAcrossTheWrap(t *testing.T) {
	st := newUplinkStore(func(spool.ID) {})
	const live = spool.ID(7 + 65535) // same wire id as record 7
	e := st.announce(live, wireID(live))
	st.Put("o.1", publishPacket(1, 1))
	st.taken(e)

	w, wait := st.pickWire(7, 1)
	if wait != nil || w == 0 || w == wireID(7) {
		t.Fatalf("QoS 1 record 7 behind in-flight record %d: id %d, wait %v; want a free id other than %d", live, w, wait != nil, wireID(7))
	}
	e1 := st.announce(7, w)
	st.Put("o.2", publishPacket(2, 1))
	st.taken(e1)
	if got := st.wireOf(2); got != w {
		t.Fatalf("paho id 2 goes out as %d, want %d", got, w)
	}
	if w2, _ := st.pickWire(8, 1); w2 == w || w2 == wireID(live) {
		t.Fatalf("the next QoS 1 record got id %d, which is taken", w2)
	}

	if w, wait := st.pickWire(7+65535*2, 2); wait == nil || w != 0 {
		t.Fatalf("QoS 2 record whose id %d is held: id %d, wait %v; want to wait", wireID(7), w, wait != nil)
	}
	st.Del("o.1") // the live record's PUBACK
	if w, wait := st.pickWire(7+65535*2, 2); wait != nil || w != wireID(7) {
		t.Fatalf("QoS 2 record after its id was freed: id %d, wait %v; want %d", w, wait != nil, wireID(7))
	}
}
