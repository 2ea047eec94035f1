package bridge

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// TestRequestIDsOnTheWire: a SUBSCRIBE or UNSUBSCRIBE goes out under a
// wire id no publish flow and no other request holds, whatever paho's id
// [MQTT-2.3.1-2](3.1.1); its answer comes back to paho under paho's id,
// read in any split; while a request holds an id a QoS 1 publish takes
// another and a QoS 2 publish whose own id it is waits for the answer;
// the connection's end frees them all.
func TestRequestIDsOnTheWire(t *testing.T) {
	st := testStore(3) // publish flows hold wire ids 1, 2, 3
	enc := func(p packets.ControlPacket) []byte {
		var b bytes.Buffer
		if err := p.Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	idOf := func(b []byte) uint16 {
		_, hl := remainingLength(b)
		return uint16(b[hl])<<8 | uint16(b[hl+1])
	}
	sub := enc(&packets.SubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Subscribe, Qos: 1},
		MessageID: 2, Topics: []string{"cmd/#"}, Qoss: []byte{1}}) // paho's 2: the wire id of record 2's flow
	rewriteOutgoing(st, sub)
	ws := idOf(sub)
	unsub := enc(&packets.UnsubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Unsubscribe, Qos: 1},
		MessageID: 9, Topics: []string{"old/#"}})
	rewriteOutgoing(st, unsub)
	wu := idOf(unsub)
	for _, w := range []uint16{ws, wu} {
		if w == 0 || w <= 3 {
			t.Fatalf("request went out under wire id %d, held by a publish flow (or none)", w)
		}
	}
	if ws == wu {
		t.Fatalf("SUBSCRIBE and UNSUBSCRIBE share wire id %d", ws)
	}

	// A QoS 1 publish whose own id the SUBSCRIBE holds takes another; a
	// QoS 2 one waits for the SUBACK.
	rec := spool.ID(ws) // wireID(rec) == ws
	if w, wait := st.pickWire(rec, 1); w == ws || w == 0 || wait != nil {
		t.Fatalf("QoS 1 publish of record %d got id %d (wait %v) while the SUBSCRIBE holds %d", rec, w, wait, ws)
	}
	w, wait := st.pickWire(rec, 2)
	if w != 0 || wait == nil {
		t.Fatalf("QoS 2 publish of record %d got id %d while the SUBSCRIBE holds it", rec, w)
	}

	// The answers, byte by byte: paho's ids come back; a PUBACK after
	// them is still rewritten.
	suback := enc(&packets.SubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Suback}, MessageID: ws, ReturnCodes: []byte{1}})
	unsuback := enc(&packets.UnsubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Unsuback}, MessageID: wu})
	stream := append(append(bytes.Clone(suback), unsuback...), 0x40, 2, byte(wireID(1)>>8), byte(wireID(1)))
	rw := ackRewriter{st: st}
	var got []byte
	for i := range stream {
		got = rw.filter(stream[i:i+1], got)
	}
	want := append(append([]byte{suback[0], suback[1], 0, 2}, suback[4:]...), unsuback[0], unsuback[1], 0, 9, 0x40, 2, 1001>>8, 1001&0xff)
	if !bytes.Equal(got, want) {
		t.Fatalf("answers read as % x, want % x", got, want)
	}
	select {
	case <-wait:
	default:
		t.Fatal("the QoS 2 publish still waits after the SUBACK")
	}
	if w, wait := st.pickWire(rec, 2); w != ws || wait != nil {
		t.Fatalf("after the SUBACK record %d got id %d (wait %v), want its own %d", rec, w, wait, ws)
	}

	// An answer to no request reaches paho under id 0, which names no
	// token of paho's (a publish's would be completed, its id freed);
	// the connection's end frees what is still held.
	stray := enc(&packets.SubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Suback}, MessageID: 1002, ReturnCodes: []byte{0}})
	if got, want := rw.filter(stray, nil), []byte{stray[0], stray[1], 0, 0, 0}; !bytes.Equal(got, want) {
		t.Fatalf("a SUBACK for no request became % x, want % x", got, want)
	}
	sub = enc(&packets.SubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Subscribe, Qos: 1},
		MessageID: 3, Topics: []string{"cmd/#"}, Qoss: []byte{1}})
	rewriteOutgoing(st, sub)
	held := idOf(sub)
	_, wait = st.pickWire(spool.ID(held), 2)
	st.dropRequests()
	select {
	case <-wait:
	default:
		t.Fatal("the connection's end did not release a publish waiting for a request's id")
	}
	if w, _ := st.pickWire(spool.ID(held), 2); w != held {
		t.Fatalf("id %d still held after the connection's end", held)
	}
}

// TestRequestAvoidsThePublishBeingStarted: the sender picks a QoS 2
// publish's wire id (pickWire), announces it and hands it to paho, which
// files it under s.wire only in Put; a SUBSCRIBE paho writes meanwhile (a
// reload's) must not take that id [MQTT-2.3.1-2](3.1.1).
func TestRequestAvoidsThePublishBeingStarted(t *testing.T) {
	st := testStore(3)
	sub := func(pid uint16) uint16 {
		var b bytes.Buffer
		p := &packets.SubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Subscribe, Qos: 1},
			MessageID: pid, Topics: []string{"cmd/#"}, Qoss: []byte{1}}
		if err := p.Write(&b); err != nil {
			t.Fatal(err)
		}
		raw := b.Bytes()
		rewriteOutgoing(st, raw)
		_, hl := remainingLength(raw)
		return uint16(raw[hl])<<8 | uint16(raw[hl+1])
	}
	const rec = spool.ID(50)
	w, wait := st.pickWire(rec, 2)
	if w != wireID(rec) || wait != nil {
		t.Fatalf("record %d: id %d, wait %v", rec, w, wait)
	}
	st.reqNext = w - 1 // the request cursor's next id is the publish's
	if got := sub(7); got == w {
		t.Fatalf("a SUBSCRIBE between pickWire and announce took id %d, the publish's", w)
	}
	e := st.announce(rec, w)
	st.reqNext = w - 1
	if got := sub(8); got == w {
		t.Fatalf("a SUBSCRIBE between announce and Put took id %d, the publish's", w)
	}
	st.Put("o.2000", publishPacket(2000, 2))
	st.taken(e)
	if got := st.wireOf(2000); got != w {
		t.Fatalf("the publish goes out as %d, want %d", got, w)
	}
}
