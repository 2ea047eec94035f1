package main

// Publishers and receivers shared by the scenarios. Payload layout (at least
// 16 bytes): [0:8] send time in ns since the run's base (monotonic clock of
// this process), [8:12] publisher index, [12:16] sequence number from 1.

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

const minPayload = 16

// publisher owns one connection's outgoing PUBLISH stream.
type publisher struct {
	c      *conn
	pub    packet.Publish // reused for every message; guarded by c.wmu while encoding
	win    chan struct{}  // in-flight window for QoS 1/2, nil for QoS 0
	base   time.Time
	idx    uint32
	seq    uint32
	nextID uint16
	sent   int64 // only touched by the publishing goroutine
	acked  atomic.Int64
}

func newPublisher(c *conn, base time.Time, idx int, topic string, qos byte, size, window int) *publisher {
	if size < minPayload {
		size = minPayload
	}
	p := &publisher{c: c, base: base, idx: uint32(idx)}
	p.pub = packet.Publish{QoS: qos, Topic: topic, Payload: make([]byte, size)}
	if qos > 0 {
		p.win = make(chan struct{}, window)
	}
	return p
}

// onAck releases one window slot (called by the connection's reader).
func (p *publisher) onAck(uint16) {
	p.acked.Add(1)
	select {
	case <-p.win:
	default:
	}
}

// publish sends one message, waiting for a window slot when needed; it
// returns false when stop closed or the connection failed.
func (p *publisher) publish(stop <-chan struct{}) bool {
	if p.win != nil {
		select {
		case p.win <- struct{}{}:
		default:
			if p.c.flush() != nil {
				return false
			}
			select {
			case p.win <- struct{}{}:
			case <-stop:
				return false
			}
		}
	}
	p.seq++
	pl := p.pub.Payload
	binary.BigEndian.PutUint64(pl[0:], uint64(time.Since(p.base)))
	binary.BigEndian.PutUint32(pl[8:], p.idx)
	binary.BigEndian.PutUint32(pl[12:], p.seq)
	if p.pub.QoS > 0 {
		p.nextID++
		if p.nextID == 0 {
			p.nextID = 1
		}
		p.pub.PacketID = p.nextID
	}
	p.c.wmu.Lock()
	err := p.c.appendLocked(&p.pub)
	p.c.wmu.Unlock()
	if err != nil {
		return false
	}
	p.sent++
	return true
}

// receiver counts and times incoming messages of one subscriber connection.
// publish runs on that connection's reader goroutine only.
type receiver struct {
	base     time.Time
	hist     Hist
	n        atomic.Int64
	lastNs   atomic.Int64 // receive time of the latest message, ns since base
	lastSeq  []uint32     // per publisher index
	dups     int64        // sequence not above the previous one (duplicate or reordered)
	inWindow int64        // set by the scenario: messages received when publishing stopped
}

func newReceiver(base time.Time, pubs int) *receiver {
	return &receiver{base: base, lastSeq: make([]uint32, pubs)}
}

func (r *receiver) publish(payload []byte) {
	now := time.Since(r.base)
	if len(payload) >= minPayload {
		r.hist.Record(now - time.Duration(binary.BigEndian.Uint64(payload)))
		idx := binary.BigEndian.Uint32(payload[8:])
		seq := binary.BigEndian.Uint32(payload[12:])
		if int(idx) < len(r.lastSeq) {
			if seq <= r.lastSeq[idx] {
				r.dups++
			} else {
				r.lastSeq[idx] = seq
			}
		}
	}
	r.lastNs.Store(int64(now))
	r.n.Add(1)
}
