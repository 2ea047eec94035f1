package bridge

// Design note: packet ids on the wire. paho numbers its publishes itself,
// from 1 for every new client, and a new process starts with an empty
// store. After a crash (or a stop that could not wait for its flows), the
// cloud broker may still hold QoS 2 flows of the old process in its
// persistent session, under ids paho would now give to other messages: a
// new message under such an id is taken for a duplicate and silently
// dropped, and the old message is released in its place.
//
// So the ids the broker sees are not paho's: the uplink connection rewrites
// them. A publish carrying spool record r goes out under wireID(r), which
// depends only on the record, so a restarted process sends each unfinished
// QoS 2 record under the id its predecessor used, and the broker
// recognises it (a QoS 1 publish may take another id: pickWireID).
// The rewriting touches only the publish flows the bridge starts: outgoing
// PUBLISH (QoS 1/2) and PUBREL, incoming PUBACK, PUBREC and PUBCOMP. An
// incoming ack for an id the bridge no longer knows (a late duplicate) is
// dropped rather than handed to paho, where it could complete an unrelated
// flow.

import "github.com/edgegw/edgegw/bridge/spool"

// wireID is the packet id of the publish carrying spool record rec. Two
// records share an id only 65535 records apart, and the two can be in
// flight at once: with priority lanes or live-first, a live record may go
// while one 65535 older still waits in the backlog. Then only a QoS 2
// publish waits for its id (pickWireID): a restarted process must send an
// unfinished QoS 2 record under the id its predecessor used. A QoS 1
// publish takes a free id instead: no id of its survives a restart (a QoS
// 1 message sent again is delivered at least once either way), and waiting
// let the backlog advance only as fast as live records freed ids, one per
// live reading (a 100,000-record backlog stalled after 35,000 at the live
// rate of 20 msg/s, make bench-lanes).
func wireID(rec spool.ID) uint16 { return uint16((rec-1)%65535) + 1 }

// pickWireID returns the packet id for a publish of record rec at qos, or
// 0 and a channel to wait on; held returns what to wait on while a publish
// holds an id (nil: none does). A QoS 1 publish whose own id is held gets
// the first id from *cursor on that free accepts (never all 65535 are
// taken: the window holds at most autoMaxCount).
func pickWireID(rec spool.ID, qos byte, cursor *uint16, held func(uint16) <-chan struct{}, free func(uint16) bool) (uint16, <-chan struct{}) {
	w := wireID(rec)
	wait := held(w)
	if wait == nil || qos == 0 { // QoS 0 has no id on the wire
		return w, nil
	}
	if qos >= 2 {
		return 0, wait
	}
	for range 65535 {
		*cursor = *cursor%65535 + 1
		if free(*cursor) {
			return *cursor, nil
		}
	}
	return 0, wait
}

// Packet types the rewriting looks at.
const (
	typeConnack = 2
	typePublish = 3
	typePuback  = 4
	typePubrec  = 5
	typePubrel  = 6
	typePubcomp = 7
)

// rewriteOutgoing rewrites paho's packet id to the wire id in p if p is
// exactly one PUBLISH (QoS 1/2) or PUBREL, which is how paho writes them
// (one Write per packet). Anything else passes unchanged. It returns
// paho's id of a PUBLISH (0: p is none).
func rewriteOutgoing(st *uplinkStore, p []byte) (publish uint16) {
	if len(p) < 4 {
		return 0
	}
	typ := p[0] >> 4
	if typ == typeSubscribe || typ == typeUnsubscribe {
		rewriteRequest(st, p) // requestid.go
		return 0
	}
	if typ != typePublish && typ != typePubrel {
		return 0
	}
	rl, hl := remainingLength(p)
	if hl == 0 || hl+rl != len(p) {
		return 0
	}
	off := hl
	if typ == typePublish {
		if (p[0]>>1)&3 == 0 || len(p) < hl+2 {
			return 0
		}
		off += 2 + (int(p[hl])<<8 | int(p[hl+1]))
	}
	if off+2 > len(p) {
		return 0
	}
	pid := uint16(p[off])<<8 | uint16(p[off+1])
	if w := st.wireOf(pid); w != 0 {
		p[off], p[off+1] = byte(w>>8), byte(w)
	}
	if typ != typePublish {
		return 0
	}
	return pid
}

// remainingLength decodes the fixed header of the packet at the start of
// p: its remaining length and the header's size (0 if malformed or
// incomplete).
func remainingLength(p []byte) (rl, hl int) {
	shift := 0
	for i := 1; i < len(p) && i <= 4; i++ {
		rl |= int(p[i]&0x7f) << shift
		if p[i]&0x80 == 0 {
			return rl, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// ackRewriter follows the MQTT packet boundaries in the byte stream read
// from upstream. It holds back each PUBACK, PUBREC and PUBCOMP until its
// packet id is complete, then passes it on with paho's id (or drops it, if
// the id is unknown); a SUBACK's or UNSUBACK's id is held back the same way
// and passed on as paho's (requestid.go); every other byte passes through
// as read. On a PUBREC it also tells the store (the flow's re-send is a
// PUBREL from now on). The connection's first packet, its CONNACK, tells
// the store whether the broker kept the session (session311.go All).
type ackRewriter struct {
	st *uplinkStore

	begun   bool // the connection's first packet has started
	connack bool // in the CONNACK, its flags byte not read yet

	state  scanState
	remain int  // body bytes left (scanBody) or length read so far (scanLength)
	shift  uint // of the next remaining-length byte
	hold   [4]byte
	nhold  int     // bytes of an ack packet held back (0: not in an ack)
	answer bool    // the body is a SUBACK's or UNSUBACK's: its id is rewritten
	aid    [2]byte // the answer's id bytes read so far
	naid   int
}

type scanState uint8

const (
	scanHeader scanState = iota
	scanLength
	scanBody
)

// filter appends to out what of in may be passed on to paho now.
func (r *ackRewriter) filter(in, out []byte) []byte {
	for i := 0; i < len(in); {
		b := in[i]
		switch {
		case r.nhold > 0: // inside an ack packet: header, length 2, id
			r.hold[r.nhold] = b
			r.nhold++
			i++
			if r.nhold == 2 && b != 2 { // not the 3.1.1 ack form: pass it on
				out = append(out, r.hold[:2]...)
				r.nhold = 0
				r.state, r.remain, r.shift = scanLength, int(b&0x7f), 7
				if b&0x80 == 0 {
					r.bodyStart()
				}
				continue
			}
			if r.nhold == 4 {
				out = r.ack(out)
				r.nhold = 0
				r.state = scanHeader
			}
		case r.state == scanHeader:
			i++
			if !r.begun {
				r.begun, r.connack = true, b>>4 == typeConnack
			}
			if typ := b >> 4; typ == typePuback || typ == typePubrec || typ == typePubcomp {
				r.hold[0], r.nhold, r.answer = b, 1, false
				continue
			}
			out = append(out, b)
			typ := b >> 4
			r.answer, r.naid = typ == typeSuback || typ == typeUnsuback, 0
			r.state, r.remain, r.shift = scanLength, 0, 0
		case r.state == scanLength:
			i++
			out = append(out, b)
			r.remain |= int(b&0x7f) << r.shift
			r.shift += 7
			if b&0x80 == 0 || r.shift >= 28 {
				r.bodyStart()
			}
		case r.connack: // scanBody: the CONNACK's flags, bit 0 session present [MQTT-3.2.2-1]
			r.connack = false
			r.st.connackSession(b&1 != 0)
			out = append(out, b)
			i++
			r.remain--
			if r.remain == 0 {
				r.state = scanHeader
			}
		case r.answer && r.naid < 2: // scanBody: a request's answer, its id
			r.aid[r.naid] = b
			r.naid++
			i++
			r.remain--
			if r.naid == 2 {
				pid := r.st.answered(uint16(r.aid[0])<<8 | uint16(r.aid[1]))
				out = append(out, byte(pid>>8), byte(pid))
			} else if r.remain == 0 { // too short to hold an id: as read
				out = append(out, r.aid[:r.naid]...)
			}
			if r.remain == 0 {
				r.state = scanHeader
			}
		default: // scanBody
			n := min(r.remain, len(in)-i)
			out = append(out, in[i:i+n]...)
			i += n
			r.remain -= n
			if r.remain == 0 {
				r.state = scanHeader
			}
		}
	}
	return out
}

func (r *ackRewriter) bodyStart() {
	r.state = scanBody
	if r.remain == 0 {
		r.state, r.connack = scanHeader, false
	}
}

// ack passes on the held ack packet with paho's id, or drops it. A
// PUBACK of a publish the bridge wrote itself completes it here
// (direct.go) and is not passed on.
func (r *ackRewriter) ack(out []byte) []byte {
	w := uint16(r.hold[2])<<8 | uint16(r.hold[3])
	if r.hold[0]>>4 == typePuback && r.st.completeDirect(w) {
		return out
	}
	pid := r.st.pahoOf(w, r.hold[0]>>4 == typePubrec)
	if pid == 0 {
		return out
	}
	return append(out, r.hold[0], r.hold[1], byte(pid>>8), byte(pid))
}
