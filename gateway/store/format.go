package store

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"
)

// On-disk format; see the package documentation.
const (
	// formatVersion is the version this edgegw writes; it reads every
	// version from oldestVersion on (version 2 added opGroup and
	// opOriginDel to version 1's records, nothing else changed).
	formatVersion = 2
	oldestVersion = 1
	fileMagic     = "EGST"
	headerSize    = 8

	recHeaderSize = 8 // length + crc32c

	// maxRecord caps one record body: a message of MQTT's maximum packet
	// size (256 MiB) with its topic, origin and properties fits.
	maxRecord = 300 << 20
)

// Record kinds (the first byte of a body).
const (
	opRetainSet  = 1
	opRetainDel  = 2
	opSessionPut = 3
	opSessionDel = 4
	opSubPut     = 5
	opSubDel     = 6
	opQAdd       = 7
	opQDel       = 8
	opQSent      = 9
	opQReleased  = 10
	opInQoS2     = 11
	opInQoS2Del  = 12
	// Version 2.
	opGroup     = 13 // an origin's inbound QoS 2 packet id with the records that routed its message
	opOriginDel = 14 // an origin's inbound QoS 2 packet id released (PUBREL), or all of them (id 0)

	opLast = opOriginDel
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errBadBody = errors.New("malformed record body")

// rec is one decoded record; which fields mean something depends on op.
type rec struct {
	op       byte
	client   string // every session record
	topic    string // opRetainDel topic, opSubDel filter
	msg      Msg    // opRetainSet, opQAdd
	meta     SessionMeta
	sub      Sub
	seq      uint64
	pid      uint16
	qos      byte
	retain   bool
	released bool
	subIDs   []uint32
	origin   string // opGroup, opOriginDel
	group    []rec  // opGroup: the records kept with the id, in the order they were appended
}

func fileHeader() []byte {
	h := make([]byte, headerSize)
	copy(h, fileMagic)
	h[4] = formatVersion
	return h
}

// appendRec frames r (length, CRC, body) at the end of dst.
func appendRec(dst []byte, r *rec) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = appendBody(dst, r)
	body := dst[start+recHeaderSize:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, castagnoli))
	return dst
}

func appendBody(b []byte, r *rec) []byte {
	b = append(b, r.op)
	switch r.op {
	case opGroup:
		return appendGroupBody(b, r)
	case opOriginDel:
		b = appendStr(b, r.origin)
		return binary.LittleEndian.AppendUint16(b, r.pid)
	case opRetainSet:
		return appendMsg(b, &r.msg)
	case opRetainDel:
		return appendStr(b, r.topic)
	}
	b = appendStr(b, r.client)
	switch r.op {
	case opSessionPut:
		m := &r.meta
		b = binary.LittleEndian.AppendUint64(b, uint64(m.Expiry))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.DisconnectedAt))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.WillAt))
		if m.Will == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendMsg(b, m.Will)
		}
		// Added after format version 1 shipped, at the end, so a record
		// without it (written before) still decodes: OwnerKnown false. It
		// stays unwritten while unknown: a compaction must not turn a
		// session nobody owns yet into the anonymous user's (only "" could
		// resume it then).
		if !m.OwnerKnown {
			return b
		}
		return appendStr(b, m.Owner)
	case opSubPut:
		s := &r.sub
		b = appendStr(b, s.Filter)
		var fl byte
		if s.NoLocal {
			fl |= 1
		}
		if s.RetainAsPublished {
			fl |= 2
		}
		fl |= (s.RetainHandling & 3) << 2
		b = append(b, s.QoS, fl)
		return binary.LittleEndian.AppendUint32(b, s.SubID)
	case opSubDel:
		return appendStr(b, r.topic)
	case opQAdd:
		b = binary.LittleEndian.AppendUint64(b, r.seq)
		var fl byte
		if r.retain {
			fl |= 1
		}
		if r.released {
			fl |= 2
		}
		b = append(b, r.qos, fl)
		b = binary.LittleEndian.AppendUint16(b, r.pid)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.subIDs)))
		for _, id := range r.subIDs {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
		return appendMsg(b, &r.msg)
	case opQDel, opQReleased:
		return binary.LittleEndian.AppendUint64(b, r.seq)
	case opQSent:
		b = binary.LittleEndian.AppendUint64(b, r.seq)
		return binary.LittleEndian.AppendUint16(b, r.pid)
	case opInQoS2, opInQoS2Del:
		return binary.LittleEndian.AppendUint16(b, r.pid)
	}
	return b // opSessionDel: the client id is all
}

// appendGroupBody: origin | packet id (0: none kept) | count uint32 |
// count x (length uint32 | record body). The nested bodies have no CRC of
// their own: the group's covers them, which is the point: the id and the
// routing of its message are read back together or not at all.
func appendGroupBody(b []byte, r *rec) []byte {
	b = appendStr(b, r.origin)
	b = binary.LittleEndian.AppendUint16(b, r.pid)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.group)))
	for i := range r.group {
		at := len(b)
		b = append(b, 0, 0, 0, 0)
		b = appendBody(b, &r.group[i])
		binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// appendMsg: topic | flags (bits 0-1 QoS, bit 2 retain) | expiry unix ns |
// origin | props | payload.
func appendMsg(b []byte, m *Msg) []byte {
	b = appendStr(b, m.Topic)
	fl := m.QoS & 3
	if m.Retain {
		fl |= 4
	}
	b = append(b, fl)
	var exp int64
	if !m.Expiry.IsZero() {
		exp = m.Expiry.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(exp))
	b = appendStr(b, m.Origin)
	b = appendBytes(b, m.Props)
	return appendBytes(b, m.Payload)
}

// msgSize is len(appendMsg(nil, m)).
func msgSize(m *Msg) int {
	return 2 + len(m.Topic) + 1 + 8 + 2 + len(m.Origin) + 4 + len(m.Props) + 4 + len(m.Payload)
}

// dec reads a body; any overrun sets bad and yields zero values.
type dec struct {
	b   []byte
	bad bool
}

func (d *dec) take(n int) []byte {
	if d.bad || n > len(d.b) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *dec) str() string { return string(d.take(int(d.u16()))) }

// bytes copies: a decoded message must not pin the whole file in memory.
func (d *dec) bytes() []byte {
	v := d.take(int(d.u32()))
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *dec) msg() Msg {
	var m Msg
	m.Topic = d.str()
	fl := d.u8()
	if fl&^7 != 0 || fl&3 == 3 {
		d.bad = true
	}
	m.QoS, m.Retain = fl&3, fl&4 != 0
	if exp := int64(d.u64()); exp != 0 {
		m.Expiry = time.Unix(0, exp)
	}
	m.Origin = d.str()
	m.Props = d.bytes()
	m.Payload = d.bytes()
	return m
}

// decodeBody parses a record body whose CRC matched.
func decodeBody(body []byte) (rec, error) { return decodeBodyIn(body, false) }

// decodeGroup reads an opGroup body after its kind byte.
func decodeGroup(d *dec) rec {
	r := rec{op: opGroup, origin: d.str(), pid: d.u16()}
	n := int(d.u32())
	if n > len(d.b)/5 { // every nested record takes at least 5 bytes
		d.bad = true
		return r
	}
	if n > 0 {
		r.group = make([]rec, 0, n)
	}
	for range n {
		body := d.take(int(d.u32()))
		if d.bad {
			return r
		}
		nr, err := decodeBodyIn(body, true)
		if err != nil {
			d.bad = true
			return r
		}
		r.group = append(r.group, nr)
	}
	if r.origin == "" || (r.pid == 0 && n == 0) {
		d.bad = true // a group keeps an id, or records, or both
	}
	return r
}

// decodeBodyIn parses a record body; nested: it is inside a group, which
// holds no group.
func decodeBodyIn(body []byte, nested bool) (rec, error) {
	d := dec{b: body}
	r := rec{op: d.u8()}
	switch r.op {
	case opGroup:
		if nested {
			return rec{}, errBadBody
		}
		r = decodeGroup(&d)
	case opOriginDel:
		if nested {
			return rec{}, errBadBody
		}
		r.origin = d.str()
		r.pid = d.u16()
		if r.origin == "" {
			d.bad = true
		}
	case opRetainSet:
		r.msg = d.msg()
		r.topic = r.msg.Topic
	case opRetainDel:
		r.topic = d.str()
	case opSessionPut, opSessionDel, opSubPut, opSubDel, opQAdd, opQDel, opQSent, opQReleased, opInQoS2, opInQoS2Del:
		r.client = d.str()
	default:
		return rec{}, errBadBody
	}
	switch r.op {
	case opSessionPut:
		r.meta.Expiry = time.Duration(d.u64())
		r.meta.DisconnectedAt = int64(d.u64())
		r.meta.WillAt = int64(d.u64())
		switch d.u8() {
		case 0:
		case 1:
			w := d.msg()
			r.meta.Will = &w
		default:
			d.bad = true
		}
		if len(d.b) > 0 {
			r.meta.Owner, r.meta.OwnerKnown = d.str(), true
		}
	case opSubPut:
		r.sub.Filter = d.str()
		r.sub.QoS = d.u8()
		fl := d.u8()
		r.sub.NoLocal, r.sub.RetainAsPublished, r.sub.RetainHandling = fl&1 != 0, fl&2 != 0, (fl>>2)&3
		r.sub.SubID = d.u32()
		if r.sub.QoS > 2 || fl&^15 != 0 {
			d.bad = true
		}
	case opSubDel:
		r.topic = d.str()
	case opQAdd:
		r.seq = d.u64()
		r.qos = d.u8()
		fl := d.u8()
		r.retain, r.released = fl&1 != 0, fl&2 != 0
		r.pid = d.u16()
		if n := int(d.u16()); n > 0 {
			r.subIDs = make([]uint32, 0, min(n, len(d.b)/4))
			for range n {
				r.subIDs = append(r.subIDs, d.u32())
			}
		}
		r.msg = d.msg()
		if r.qos == 0 || r.qos > 2 || fl&^3 != 0 || (r.released && (r.qos != 2 || r.pid == 0)) {
			d.bad = true
		}
	case opQDel, opQReleased:
		r.seq = d.u64()
	case opQSent:
		r.seq = d.u64()
		r.pid = d.u16()
		if r.pid == 0 {
			d.bad = true
		}
	case opInQoS2, opInQoS2Del:
		r.pid = d.u16()
	}
	if d.bad || len(d.b) != 0 {
		return rec{}, errBadBody
	}
	return r, nil
}

// scanResult says what scan found in a file body.
type scanResult struct {
	records     int   // valid records
	badRecords  int   // framed and CRC-valid but undecodable, or damaged regions skipped
	skipped     int64 // bytes skipped in damaged regions before the last valid record
	tail        int64 // unreadable bytes after the last valid record (a torn or damaged tail)
	lastGoodEnd int64 // offset just past the last valid record (relative to b)
}

// scan calls fn for each valid record in b (the file after its header).
// A record that fails its length or CRC check is skipped by searching
// forward, byte by byte, for the next offset where a record with a valid
// length and CRC starts: a damaged record loses that record, not the rest.
func scan(b []byte, fn func(rec)) scanResult {
	var res scanResult
	off := 0
	for off < len(b) {
		body, ok := frameAt(b, off)
		if !ok {
			next := resync(b, off+1)
			if next < 0 {
				res.tail = int64(len(b) - off)
				break
			}
			res.skipped += int64(next - off)
			res.badRecords++
			off = next
			continue
		}
		off += recHeaderSize + len(body)
		r, err := decodeBody(body)
		if err != nil {
			res.badRecords++
		} else {
			res.records++
			fn(r)
		}
		res.lastGoodEnd = int64(off)
	}
	return res
}

// frameAt returns the body of the record at off if its framing and CRC hold.
func frameAt(b []byte, off int) ([]byte, bool) {
	if len(b)-off < recHeaderSize+1 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b[off:]))
	if n == 0 || n > maxRecord || n > len(b)-off-recHeaderSize {
		return nil, false
	}
	body := b[off+recHeaderSize : off+recHeaderSize+n]
	if binary.LittleEndian.Uint32(b[off+4:]) != crc32.Checksum(body, castagnoli) {
		return nil, false
	}
	return body, true
}

// resync returns the first offset at or after from where a valid record
// starts, or -1.
func resync(b []byte, from int) int {
	for off := from; off+recHeaderSize < len(b); off++ {
		if b[off+recHeaderSize] == 0 || b[off+recHeaderSize] > opLast {
			continue // not a record kind: cheap reject before the CRC
		}
		if _, ok := frameAt(b, off); ok {
			return off
		}
	}
	return -1
}
