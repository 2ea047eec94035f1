package packet

// Decoding. Design note: the fixed header is read byte by byte from a
// bufio.Reader, the remaining length is capped at 4 bytes and checked against
// the caller's limit, and only then is the body read into one allocation.
// Everything below parses that body in place: byte fields (PUBLISH payload,
// password, binary properties) are sub-slices of it, strings are copied out
// (one allocation each). Nothing is pooled or reused, so a decoded packet
// owns its memory and may be handed to other goroutines. The remaining
// length is a claim, not a fact: a body is read into a buffer that grows as
// its bytes arrive (readBody), so a peer announcing 1 MiB and sending ten
// bytes costs ten bytes' worth, not the megabyte it claimed.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

const (
	// maxVarint is the largest Variable Byte Integer (4 bytes), 5.0 §1.5.5.
	maxVarint = 268435455
	// DefaultMaxSize is the largest possible packet: 1 type byte, 4 length
	// bytes and a remaining length of 268435455. Decode uses it when
	// maxSize is 0.
	DefaultMaxSize = 1 + 4 + maxVarint
)

// ErrIncomplete is returned by DecodeBytes when b ends before the packet
// does. It wraps io.ErrUnexpectedEOF.
var ErrIncomplete = fmt.Errorf("packet: incomplete packet: %w", io.ErrUnexpectedEOF)

// Decode reads one whole control packet from r.
//
// v is the connection's protocol level; 0 means it is not known yet, so the
// packet must be CONNECT and its own protocol level decides how it is parsed.
// maxSize limits the total packet size in bytes, fixed header included (0
// means DefaultMaxSize); it is checked before anything is allocated.
//
// Decode returns io.EOF when r ends before the first byte of a packet and
// io.ErrUnexpectedEOF when it ends inside one. A packet that breaks the rules
// of the specification yields an *Error whose Code is the v5 reason code to
// report. For a CONNECT with an unknown protocol name or level the *Error has
// Code UnsupportedProtocolVersion and the returned packet is a *Connect with
// only ProtocolName and Version set, so the caller can answer in kind.
func Decode(r *bufio.Reader, v Version, maxSize int) (Packet, error) {
	first, remaining, err := readFixedHeader(r, v, maxSize)
	if err != nil {
		return nil, err
	}
	body, err := readBody(r, remaining)
	if err != nil {
		return nil, err
	}
	return decodeBody(first, body, v)
}

// bodyChunkMin is the first buffer readBody allocates for a body that has
// not arrived yet. Most packets are smaller and are read in one piece.
const bodyChunkMin = 4096

// readBody reads the n-byte body of a packet from r. The buffer starts at
// what r already holds (at least bodyChunkMin) and doubles, capped at n, each
// time it fills, so memory follows the bytes received rather than the length
// claimed; the last buffer is exactly n bytes, so a kept body wastes nothing.
// A body that grows costs at most one more copy of itself.
func readBody(r *bufio.Reader, n int) ([]byte, error) {
	size := min(n, max(r.Buffered(), bodyChunkMin))
	b := make([]byte, size)
	got := 0
	for {
		m, err := io.ReadFull(r, b[got:])
		got += m
		if err != nil {
			return nil, unexpected(err)
		}
		if got == n {
			return b, nil
		}
		grown := make([]byte, min(2*len(b), n))
		copy(grown, b[:got])
		b = grown
	}
}

// readFixedHeader reads and checks the fixed header: the first byte and the
// remaining length, capped at 4 bytes and checked against maxSize before
// anything is allocated. io.EOF means the stream ended cleanly between
// packets.
func readFixedHeader(r *bufio.Reader, v Version, maxSize int) (first byte, remaining int, err error) {
	first, err = r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	if err := checkHeader(first, v); err != nil {
		return 0, 0, err
	}
	lenBytes := 0
	for mult := 1; ; mult <<= 7 {
		c, err := r.ReadByte()
		if err != nil {
			return 0, 0, unexpected(err)
		}
		lenBytes++
		remaining += int(c&0x7f) * mult
		if c&0x80 == 0 {
			break
		}
		if lenBytes == 4 {
			return 0, 0, Errorf(MalformedPacket, "remaining length longer than 4 bytes") // 5.0 §1.5.5, 3.1.1 §2.2.3
		}
	}
	if err := checkSize(1+lenBytes+remaining, maxSize); err != nil {
		return 0, 0, err
	}
	return first, remaining, nil
}

// Scratch holds the packets [DecodeInto] reuses: one value per type a
// connection receives many of. Its size (about 1.5 KiB) makes it something
// to pool with the connection's read buffer, not to keep per idle connection.
type Scratch struct {
	Publish Publish
	Puback  Puback
	Pubrec  Pubrec
	Pubrel  Pubrel
	Pubcomp Pubcomp
}

// DecodeInto is [Decode] for a connection's hot path. It applies the same
// rules and returns the same errors, but a PUBLISH, PUBACK, PUBREC, PUBREL
// or PUBCOMP is decoded into the matching field of s, which is overwritten
// and returned instead of a new allocation: the packet is valid until the
// next call with the same s. A PUBLISH still gets a body of its own, and its
// Topic shares that body's memory with its Payload (one allocation for both;
// the body is never written after decoding, so the string stays immutable
// and the Payload may be kept after s is reused); from splitPayloadMin
// bytes on, the payload gets an allocation of its own. The acknowledgements are
// decoded from the reader's buffer without copying when it holds them.
// s == nil makes it Decode.
func DecodeInto(r *bufio.Reader, v Version, maxSize int, s *Scratch) (Packet, error) {
	if s == nil {
		return Decode(r, v, maxSize)
	}
	first, remaining, err := readFixedHeader(r, v, maxSize)
	if err != nil {
		return nil, err
	}
	t := Type(first >> 4)
	switch t {
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		if remaining <= r.Buffered() {
			// Parsed in place: an ack keeps no byte slice of its body
			// (its properties are strings, which are copied).
			body, _ := r.Peek(remaining)
			d := decoder{b: body}
			p, err := d.ackInto(t, v, s)
			r.Discard(remaining)
			return p, err
		}
	}
	if t == PUBLISH && remaining >= splitPayloadMin {
		if hl, ok := publishHeaderLen(r, first, v, remaining); ok {
			return publishSplit(r, first, v, hl, remaining, s)
		}
	}
	body, err := readBody(r, remaining)
	if err != nil {
		return nil, err
	}
	d := decoder{b: body}
	switch t {
	case PUBLISH:
		s.Publish = Publish{}
		if err := d.publishInto(&s.Publish, first&0x0f, v, true); err != nil {
			return nil, err
		}
		return &s.Publish, nil
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		return d.ackInto(t, v, s)
	}
	return decodeBody(first, body, v)
}

// splitPayloadMin is the PUBLISH body size from which [DecodeInto] gives
// the payload an allocation of its own. Above 1 KiB Go's allocation size
// classes are 128 bytes or more apart, and a few header bytes push a
// payload of a round size into the next class: a 4 KiB payload with its
// topic in one body takes a 4864-byte block, 18 % more than the payload,
// for as long as the message stays queued. Separately, the payload takes
// exactly its class and the header a small block.
const splitPayloadMin = 1024

// publishHeaderLen measures the variable header (topic, packet id, v5
// properties) of the PUBLISH body that r starts with, from what r can
// peek without consuming anything. ok is false when the header is not in
// the buffer or does not fit in the body: the caller then decodes the body
// in one piece, which also reports malformed headers.
func publishHeaderLen(r *bufio.Reader, first byte, v Version, remaining int) (int, bool) {
	b, err := r.Peek(2)
	if err != nil {
		return 0, false
	}
	n := 2 + (int(b[0])<<8 | int(b[1]))
	if first>>1&0x03 > 0 {
		n += 2
	}
	if v == V5 {
		// The property length: a Variable Byte Integer of at most 4 bytes.
		b, err = r.Peek(min(n+4, remaining))
		if err != nil || len(b) <= n {
			return 0, false
		}
		d := decoder{b: b[n:]}
		pl, err := d.varint()
		if err != nil {
			return 0, false
		}
		n += d.off + pl
	}
	if n >= remaining || n > r.Size() {
		return 0, false
	}
	if _, err := r.Peek(n); err != nil {
		return 0, false
	}
	return n, true
}

// publishSplit decodes a PUBLISH whose variable header is hl of its
// remaining bytes into s.Publish, with the header (which the topic and
// properties alias) and the payload in separate allocations.
func publishSplit(r *bufio.Reader, first byte, v Version, hl, remaining int, s *Scratch) (Packet, error) {
	hdr := make([]byte, hl) // in r's buffer already (publishHeaderLen peeked it)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, unexpected(err)
	}
	payload, err := readBody(r, remaining-hl)
	if err != nil {
		return nil, err
	}
	d := decoder{b: hdr}
	s.Publish = Publish{}
	if err := d.publishInto(&s.Publish, first&0x0f, v, true); err != nil {
		return nil, err
	}
	s.Publish.Payload = payload
	return &s.Publish, nil
}

// DecodeBytes decodes one control packet from the start of b and returns it
// with the number of bytes it took. It applies the rules of Decode; when b
// ends before the packet does it returns an error wrapping ErrIncomplete
// (and so io.ErrUnexpectedEOF). The packet does not alias b: the body is
// copied, so b may be reused at once.
func DecodeBytes(b []byte, v Version, maxSize int) (Packet, int, error) {
	if len(b) == 0 {
		return nil, 0, ErrIncomplete
	}
	if err := checkHeader(b[0], v); err != nil {
		return nil, 0, err
	}
	remaining, i := 0, 1
	for mult := 1; ; mult <<= 7 {
		if i >= len(b) {
			return nil, 0, ErrIncomplete
		}
		c := b[i]
		i++
		remaining += int(c&0x7f) * mult
		if c&0x80 == 0 {
			break
		}
		if i == 5 {
			return nil, 0, Errorf(MalformedPacket, "remaining length longer than 4 bytes") // 5.0 §1.5.5, 3.1.1 §2.2.3
		}
	}
	total := i + remaining
	if err := checkSize(total, maxSize); err != nil {
		return nil, 0, err
	}
	if len(b) < total {
		return nil, 0, ErrIncomplete
	}
	body := make([]byte, remaining)
	copy(body, b[i:total])
	p, err := decodeBody(b[0], body, v)
	if err != nil {
		return p, 0, err
	}
	return p, total, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func checkSize(total, maxSize int) error {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if total > maxSize {
		// No sender exceeds the receiver's Maximum Packet Size ([MQTT-3.2.2-15]
		// client, [MQTT-3.1.2-24] server); a receiver sent a larger packet
		// disconnects with 0x95 (5.0 §3.1.2.11.4, §3.2.2.3.6).
		return Errorf(PacketTooLarge, "packet of %d bytes exceeds the limit of %d", total, maxSize)
	}
	return nil
}

// checkHeader validates the first byte of the fixed header: the packet type
// for the protocol level and the reserved flag bits.
func checkHeader(first byte, v Version) error {
	t, flags := Type(first>>4), first&0x0f
	switch v {
	case 0:
		if t != CONNECT {
			// [MQTT-3.1.0-1]: the first packet from the
			// client MUST be CONNECT.
			if looksLikeHTTP(first) {
				return Errorf(ProtocolError, "first packet is %s, not CONNECT (an HTTP request on the MQTT port?)", t)
			}
			return Errorf(ProtocolError, "first packet is %s, not CONNECT", t)
		}
	case V31, V311, V5:
	default:
		return Errorf(UnsupportedProtocolVersion, "unsupported protocol level %d", v)
	}
	switch t {
	case 0:
		return Errorf(MalformedPacket, "reserved packet type 0") // 5.0 §2.1.2, 3.1.1 §2.2.1
	case AUTH:
		if v != V5 && v != 0 {
			return Errorf(MalformedPacket, "packet type 15 is reserved before MQTT 5") // 3.1.1 §2.2.1
		}
	case PUBLISH:
		if flags&0x06 == 0x06 {
			return Errorf(MalformedPacket, "publish with qos 3") // [MQTT-3.3.1-4]
		}
		if flags&0x08 != 0 && flags&0x06 == 0 {
			return Errorf(MalformedPacket, "dup flag set on a qos 0 publish") // [MQTT-3.3.1-2]
		}
		return nil
	case PUBREL, SUBSCRIBE, UNSUBSCRIBE:
		// MQTT 3.1 sends these with QoS 1 and may set DUP on a retry.
		if v == V31 {
			flags &^= 0x08
		}
		if flags != 0x02 {
			// [MQTT-3.6.1-1], [MQTT-3.8.1-1], [MQTT-3.10.1-1]
			return Errorf(MalformedPacket, "%s fixed header flags 0x%x, want 0x2", t, flags)
		}
		return nil
	}
	if flags != 0 {
		if v == 0 && first == 0x16 {
			return Errorf(MalformedPacket, "CONNECT fixed header flags 0x6 (a TLS handshake on a plain MQTT port?)")
		}
		return Errorf(MalformedPacket, "%s fixed header flags 0x%x, want 0", t, flags) // [MQTT-2.1.3-1], [MQTT-2.2.2-1](3.1.1), [MQTT-2.2.2-2](3.1.1)
	}
	return nil
}

// looksLikeHTTP reports whether the first byte is that of an HTTP method
// (GET, POST, PUT, HEAD, OPTIONS, DELETE, CONNECT, PATCH, TRACE).
func looksLikeHTTP(c byte) bool {
	switch c {
	case 'G', 'P', 'H', 'O', 'D', 'C', 'T':
		return true
	}
	return false
}

// decoder reads fields from a packet body. It never panics on short input:
// every read checks the bounds and reports MalformedPacket.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) rest() int { return len(d.b) - d.off }

func (d *decoder) short(what string) error {
	return Errorf(MalformedPacket, "packet ends inside %s", what)
}

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.b) {
		return 0, d.short("a byte field")
	}
	c := d.b[d.off]
	d.off++
	return c, nil
}

func (d *decoder) u16() (uint16, error) {
	if d.rest() < 2 {
		return 0, d.short("a two byte integer")
	}
	v := uint16(d.b[d.off])<<8 | uint16(d.b[d.off+1])
	d.off += 2
	return v, nil
}

func (d *decoder) u32() (uint32, error) {
	if d.rest() < 4 {
		return 0, d.short("a four byte integer")
	}
	b := d.b[d.off:]
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	d.off += 4
	return v, nil
}

// varint reads a Variable Byte Integer of at most 4 bytes, 5.0 §1.5.5.
func (d *decoder) varint() (int, error) {
	v := 0
	for i, mult := 0, 1; i < 4; i, mult = i+1, mult<<7 {
		c, err := d.byte()
		if err != nil {
			return 0, err
		}
		v += int(c&0x7f) * mult
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, Errorf(MalformedPacket, "variable byte integer longer than 4 bytes") // 5.0 §1.5.5
}

// raw reads a two-byte length and that many bytes, as a sub-slice.
func (d *decoder) raw() ([]byte, error) {
	n, err := d.u16()
	if err != nil {
		return nil, err
	}
	if d.rest() < int(n) {
		return nil, Errorf(MalformedPacket, "field of %d bytes exceeds the remaining %d", n, d.rest())
	}
	b := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

// bin reads Binary Data; a zero-length value decodes as nil.
func (d *decoder) bin() ([]byte, error) {
	b, err := d.raw()
	if len(b) == 0 {
		return nil, err
	}
	return b, err
}

// str reads a UTF-8 Encoded String and validates it.
func (d *decoder) str() (string, error) {
	b, err := d.raw()
	if err != nil {
		return "", err
	}
	if !validString(b) {
		// [MQTT-1.5.4-1], [MQTT-1.5.4-2]; [MQTT-1.5.3-1](3.1.1), [MQTT-1.5.3-2](3.1.1)
		return "", Errorf(MalformedPacket, "string is not well-formed UTF-8 or contains U+0000")
	}
	return string(b), nil
}

// packetID reads a Packet Identifier, which must be non-zero.
func (d *decoder) packetID() (uint16, error) {
	id, err := d.u16()
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, Errorf(MalformedPacket, "packet identifier 0") // [MQTT-2.2.1-3], [MQTT-2.3.1-1](3.1.1)
	}
	return id, nil
}

// done returns p when the body has been consumed exactly.
func done(d *decoder, p Packet, t Type) (Packet, error) {
	if err := d.end(t); err != nil {
		return nil, err
	}
	return p, nil
}

func (d *decoder) end(t Type) error {
	if d.off != len(d.b) {
		return Errorf(MalformedPacket, "%d trailing bytes in %s", len(d.b)-d.off, t)
	}
	return nil
}

func decodeBody(first byte, body []byte, v Version) (Packet, error) {
	d := &decoder{b: body}
	t, flags := Type(first>>4), first&0x0f
	switch t {
	case CONNECT:
		return d.connect()
	case CONNACK:
		return d.connack(v)
	case PUBLISH:
		return d.publish(flags, v)
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		return d.ack(t, v)
	case SUBSCRIBE:
		return d.subscribe(v)
	case SUBACK:
		return d.suback(v)
	case UNSUBSCRIBE:
		return d.unsubscribe(v)
	case UNSUBACK:
		return d.unsuback(v)
	case PINGREQ, PINGRESP:
		if len(body) != 0 {
			return nil, Errorf(MalformedPacket, "%s with a remaining length of %d", t, len(body)) // 3.12.1, 3.13.1
		}
		if t == PINGREQ {
			return pingreq, nil
		}
		return pingresp, nil
	case DISCONNECT:
		return d.disconnectOrAuth(t, v)
	case AUTH:
		return d.disconnectOrAuth(t, v)
	}
	return nil, Errorf(MalformedPacket, "reserved packet type %d", t)
}

// PINGREQ and PINGRESP carry nothing: every decode returns the same value.
var (
	pingreq  = &Pingreq{}
	pingresp = &Pingresp{}
)

func (d *decoder) connect() (Packet, error) {
	name, err := d.str()
	if err != nil {
		return nil, err
	}
	level, err := d.byte()
	if err != nil {
		return nil, err
	}
	c := &Connect{ProtocolName: name, Version: Version(level)}
	switch {
	case name == "MQTT" && (c.Version == V311 || c.Version == V5):
	case name == "MQIsdp" && c.Version == V31:
	default:
		// [MQTT-3.1.2-1], [MQTT-3.1.2-2] (CONNACK 0x84); [MQTT-3.1.2-1](3.1.1),
		// [MQTT-3.1.2-2](3.1.1) (CONNACK 0x01). The partial Connect lets the broker pick.
		return &Connect{ProtocolName: name, Version: Version(level)},
			Errorf(UnsupportedProtocolVersion, "protocol %q level %d", name, level)
	}
	flags, err := d.byte()
	if err != nil {
		return nil, err
	}
	if flags&0x01 != 0 {
		return nil, Errorf(MalformedPacket, "connect flags reserved bit set") // [MQTT-3.1.2-3]
	}
	c.CleanStart = flags&0x02 != 0
	willFlag := flags&0x04 != 0
	willQoS := flags >> 3 & 0x03
	willRetain := flags&0x20 != 0
	c.PasswordFlag = flags&0x40 != 0
	c.UsernameFlag = flags&0x80 != 0
	if !willFlag && (willQoS != 0 || willRetain) {
		return nil, Errorf(MalformedPacket, "will qos or retain set without the will flag") // [MQTT-3.1.2-11], [MQTT-3.1.2-13]; [MQTT-3.1.2-11](3.1.1), [MQTT-3.1.2-13](3.1.1), [MQTT-3.1.2-15](3.1.1)
	}
	if willQoS == 3 {
		return nil, Errorf(MalformedPacket, "will qos 3") // [MQTT-3.1.2-12], [MQTT-3.1.2-14](3.1.1)
	}
	if c.Version != V5 && c.PasswordFlag && !c.UsernameFlag {
		return nil, Errorf(MalformedPacket, "password flag without user name flag") // [MQTT-3.1.2-22](3.1.1) (allowed in 5.0)
	}
	if c.KeepAlive, err = d.u16(); err != nil {
		return nil, err
	}
	if c.Version == V5 {
		if err := d.decodeProps(&c.Props, CONNECT); err != nil {
			return nil, err
		}
	}
	if c.ClientID, err = d.str(); err != nil { // [MQTT-3.1.3-4]
		return nil, err
	}
	if willFlag {
		w := &Will{QoS: willQoS, Retain: willRetain}
		if c.Version == V5 {
			if err := d.decodeProps(&w.Props, willContext); err != nil {
				return nil, err
			}
		}
		if w.Topic, err = d.str(); err != nil {
			return nil, err
		}
		if err := ValidTopicName(w.Topic); err != nil {
			return nil, err // [MQTT-3.1.3-11], [MQTT-3.1.3-10](3.1.1): the will topic is a topic name
		}
		payload, err := d.bin()
		if err != nil {
			return nil, err
		}
		// Copied so a will kept for the life of a session does not pin the
		// CONNECT body (client id, user name, password).
		if payload != nil {
			w.Payload = append([]byte(nil), payload...)
		}
		c.Will = w
	}
	if c.UsernameFlag {
		if c.Username, err = d.str(); err != nil { // [MQTT-3.1.2-17], [MQTT-3.1.2-19](3.1.1)
			return nil, err
		}
	}
	if c.PasswordFlag {
		if c.Password, err = d.bin(); err != nil { // [MQTT-3.1.2-19], [MQTT-3.1.2-21](3.1.1)
			return nil, err
		}
	}
	return done(d, c, CONNECT)
}

// connackCodes are the v5 CONNACK reason codes, 5.0 §3.2.2.2.
var connackCodes = codeSet(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
	0x8A, 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F)

func (d *decoder) connack(v Version) (Packet, error) {
	flags, err := d.byte()
	if err != nil {
		return nil, err
	}
	code, err := d.byte()
	if err != nil {
		return nil, err
	}
	c := &Connack{ReasonCode: ReasonCode(code)}
	switch v {
	case V31:
		// 3.1 has no acknowledge flags: the byte is reserved and ignored.
		if code > 5 {
			return nil, Errorf(MalformedPacket, "connack return code %d", code)
		}
		return done(d, c, CONNACK)
	case V311:
		if code > 5 {
			return nil, Errorf(MalformedPacket, "connack return code %d", code) // 3.1.1 §3.2.2.3: 6-255 reserved
		}
	case V5:
		if !connackCodes.has(code) {
			return nil, Errorf(ProtocolError, "connack reason code 0x%02x", code)
		}
	}
	if flags&0xfe != 0 {
		return nil, Errorf(MalformedPacket, "connack reserved flags 0x%02x", flags) // [MQTT-3.2.2-1], 3.1.1 §3.2.2.1
	}
	c.SessionPresent = flags&0x01 != 0
	if v == V5 {
		if err := d.decodeProps(&c.Props, CONNACK); err != nil {
			return nil, err
		}
	}
	return done(d, c, CONNACK)
}

func (d *decoder) publish(flags byte, v Version) (Packet, error) {
	p := &Publish{}
	if err := d.publishInto(p, flags, v, false); err != nil {
		return nil, err
	}
	return p, nil
}

// publishInto decodes a PUBLISH body into p (a zero value). With
// aliasTopic the topic string shares the body's memory instead of being
// copied; the caller guarantees the body is never written afterwards.
func (d *decoder) publishInto(p *Publish, flags byte, v Version, aliasTopic bool) error {
	p.Dup = flags&0x08 != 0
	p.QoS = flags >> 1 & 0x03
	p.Retain = flags&0x01 != 0
	var err error
	if aliasTopic {
		var b []byte
		if b, err = d.raw(); err != nil {
			return err
		}
		if !validString(b) {
			// [MQTT-1.5.4-1], [MQTT-1.5.4-2]; [MQTT-1.5.3-1](3.1.1), [MQTT-1.5.3-2](3.1.1)
			return Errorf(MalformedPacket, "string is not well-formed UTF-8 or contains U+0000")
		}
		if len(b) > 0 {
			p.Topic = unsafe.String(&b[0], len(b))
		}
	} else if p.Topic, err = d.str(); err != nil {
		return err
	}
	if p.QoS > 0 {
		if p.PacketID, err = d.packetID(); err != nil { // [MQTT-2.2.1-3], [MQTT-2.3.1-1](3.1.1)
			return err
		}
	}
	if v == V5 {
		if err := d.decodeProps(&p.Props, PUBLISH); err != nil {
			return err
		}
	}
	// 5.0 §3.3.2.1: an empty topic is allowed when a Topic Alias is present.
	if p.Topic != "" || !p.Props.Has(PropTopicAlias) {
		if err := ValidTopicName(p.Topic); err != nil {
			return err // [MQTT-3.3.2-2] wildcards, [MQTT-4.7.3-1] empty
		}
	}
	if d.rest() > 0 {
		p.Payload = d.b[d.off:len(d.b):len(d.b)]
		d.off = len(d.b)
	}
	return nil
}

// ackCodes are the v5 reason codes of PUBACK/PUBREC and PUBREL/PUBCOMP,
// 5.0 §3.4.2.1, 3.5.2.1, 3.6.2.1, 3.7.2.1.
var (
	pubackCodes = codeSet(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99)
	pubrelCodes = codeSet(0x00, 0x92)
)

func (d *decoder) ack(t Type, v Version) (Packet, error) {
	return d.ackInto(t, v, nil)
}

// ackInto decodes PUBACK, PUBREC, PUBREL or PUBCOMP into the matching field
// of s, or into a new packet when s is nil.
func (d *decoder) ackInto(t Type, v Version, s *Scratch) (Packet, error) {
	id, err := d.packetID()
	if err != nil {
		return nil, err
	}
	var code ReasonCode
	var props Properties
	if v == V5 && d.rest() > 0 {
		// 5.0 §3.4.2.1: the reason code and property length may be omitted
		// (remaining length 2), and the property length alone may be
		// omitted (remaining length 3).
		c, _ := d.byte()
		set := pubackCodes
		if t == PUBREL || t == PUBCOMP {
			set = pubrelCodes
		}
		if !set.has(c) {
			return nil, Errorf(ProtocolError, "%s reason code 0x%02x", t, c)
		}
		code = ReasonCode(c)
		if d.rest() > 0 {
			if err := d.decodeProps(&props, t); err != nil {
				return nil, err
			}
		}
	}
	if err := d.end(t); err != nil {
		return nil, err
	}
	if s != nil {
		switch t {
		case PUBACK:
			s.Puback = Puback{PacketID: id, ReasonCode: code, Props: props}
			return &s.Puback, nil
		case PUBREC:
			s.Pubrec = Pubrec{PacketID: id, ReasonCode: code, Props: props}
			return &s.Pubrec, nil
		case PUBREL:
			s.Pubrel = Pubrel{PacketID: id, ReasonCode: code, Props: props}
			return &s.Pubrel, nil
		default:
			s.Pubcomp = Pubcomp{PacketID: id, ReasonCode: code, Props: props}
			return &s.Pubcomp, nil
		}
	}
	switch t {
	case PUBACK:
		return &Puback{PacketID: id, ReasonCode: code, Props: props}, nil
	case PUBREC:
		return &Pubrec{PacketID: id, ReasonCode: code, Props: props}, nil
	case PUBREL:
		return &Pubrel{PacketID: id, ReasonCode: code, Props: props}, nil
	default:
		return &Pubcomp{PacketID: id, ReasonCode: code, Props: props}, nil
	}
}

func (d *decoder) subscribe(v Version) (Packet, error) {
	s := &Subscribe{}
	var err error
	if s.PacketID, err = d.packetID(); err != nil { // [MQTT-2.2.1-3], [MQTT-2.3.1-1](3.1.1)
		return nil, err
	}
	if v == V5 {
		if err := d.decodeProps(&s.Props, SUBSCRIBE); err != nil {
			return nil, err
		}
	}
	if d.rest() == 0 {
		return nil, Errorf(ProtocolError, "subscribe without topic filters") // [MQTT-3.8.3-2], [MQTT-3.8.3-3](3.1.1)
	}
	for d.rest() > 0 {
		f, err := d.str()
		if err != nil {
			return nil, err
		}
		if err := ValidTopicFilter(f); err != nil {
			return nil, err
		}
		o, err := d.byte()
		if err != nil {
			return nil, err
		}
		sub := Subscription{Filter: f, QoS: o & 0x03}
		if sub.QoS == 3 {
			return nil, Errorf(MalformedPacket, "subscription qos 3") // 5.0 §3.8.3.1, [MQTT-3.8.3-4](3.1.1)
		}
		if v == V5 {
			if o&0xc0 != 0 {
				return nil, Errorf(MalformedPacket, "subscription options reserved bits set") // [MQTT-3.8.3-5]
			}
			sub.NoLocal = o&0x04 != 0
			sub.RetainAsPublished = o&0x08 != 0
			sub.RetainHandling = o >> 4 & 0x03
			if sub.RetainHandling == 3 {
				return nil, Errorf(ProtocolError, "retain handling 3") // 5.0 §3.8.3.1
			}
			if sub.NoLocal {
				if _, _, shared := SplitShared(f); shared {
					return nil, Errorf(ProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
				}
			}
		} else if o&0xfc != 0 {
			return nil, Errorf(MalformedPacket, "subscribe requested qos byte 0x%02x has reserved bits set", o) // [MQTT-3.8.3-4](3.1.1) (misprinted 3-8.3-4 in the spec)
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	return s, nil
}

// subackCodes are the v5 SUBACK reason codes, 5.0 §3.9.3.
var subackCodes = codeSet(0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2)

func (d *decoder) suback(v Version) (Packet, error) {
	s := &Suback{}
	var err error
	if s.PacketID, err = d.packetID(); err != nil {
		return nil, err
	}
	if v == V5 {
		if err := d.decodeProps(&s.Props, SUBACK); err != nil {
			return nil, err
		}
	}
	if d.rest() == 0 {
		return nil, Errorf(ProtocolError, "suback without reason codes") // one per filter: [MQTT-3.8.4-6], [MQTT-3.8.4-5](3.1.1)
	}
	s.ReasonCodes = make([]ReasonCode, d.rest())
	for i, c := range d.b[d.off:] {
		if v == V5 && !subackCodes.has(c) || v != V5 && c > 2 && c != 0x80 {
			return nil, Errorf(ProtocolError, "suback reason code 0x%02x", c) // [MQTT-3.9.3-2]
		}
		s.ReasonCodes[i] = ReasonCode(c)
	}
	d.off = len(d.b)
	return s, nil
}

func (d *decoder) unsubscribe(v Version) (Packet, error) {
	u := &Unsubscribe{}
	var err error
	if u.PacketID, err = d.packetID(); err != nil { // [MQTT-2.2.1-3], [MQTT-2.3.1-1](3.1.1)
		return nil, err
	}
	if v == V5 {
		if err := d.decodeProps(&u.Props, UNSUBSCRIBE); err != nil {
			return nil, err
		}
	}
	if d.rest() == 0 {
		return nil, Errorf(ProtocolError, "unsubscribe without topic filters") // [MQTT-3.10.3-2]
	}
	for d.rest() > 0 {
		f, err := d.str()
		if err != nil {
			return nil, err
		}
		if err := ValidTopicFilter(f); err != nil {
			return nil, err
		}
		u.Filters = append(u.Filters, f)
	}
	return u, nil
}

// unsubackCodes are the v5 UNSUBACK reason codes, 5.0 §3.11.3.
var unsubackCodes = codeSet(0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91)

func (d *decoder) unsuback(v Version) (Packet, error) {
	u := &Unsuback{}
	var err error
	if u.PacketID, err = d.packetID(); err != nil {
		return nil, err
	}
	if v != V5 {
		return done(d, u, UNSUBACK) // 3.1.1 §3.11.3: no payload
	}
	if err := d.decodeProps(&u.Props, UNSUBACK); err != nil {
		return nil, err
	}
	if d.rest() == 0 {
		return nil, Errorf(ProtocolError, "unsuback without reason codes") // [MQTT-3.11.3-2]
	}
	u.ReasonCodes = make([]ReasonCode, d.rest())
	for i, c := range d.b[d.off:] {
		if !unsubackCodes.has(c) {
			return nil, Errorf(ProtocolError, "unsuback reason code 0x%02x", c)
		}
		u.ReasonCodes[i] = ReasonCode(c)
	}
	d.off = len(d.b)
	return u, nil
}

var (
	// disconnectCodes are the v5 DISCONNECT reason codes, 5.0 §3.14.2.1.
	disconnectCodes = codeSet(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E,
		0x8F, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
		0xA0, 0xA1, 0xA2)
	// authCodes are the AUTH reason codes, 5.0 §3.15.2.1.
	authCodes = codeSet(0x00, 0x18, 0x19)
)

func (d *decoder) disconnectOrAuth(t Type, v Version) (Packet, error) {
	var code ReasonCode
	var props Properties
	if v != V5 {
		if err := d.end(t); err != nil { // 3.1.1 §3.14: no variable header
			return nil, err
		}
		return &Disconnect{}, nil
	}
	// 5.0 §3.14.2.1, 3.15.2.1: remaining length 0 means Success without
	// properties; a reason code alone means no properties.
	if d.rest() > 0 {
		c, _ := d.byte()
		set := disconnectCodes
		if t == AUTH {
			set = authCodes
		}
		if !set.has(c) {
			return nil, Errorf(ProtocolError, "%s reason code 0x%02x", t, c)
		}
		code = ReasonCode(c)
		if d.rest() > 0 {
			if err := d.decodeProps(&props, t); err != nil {
				return nil, err
			}
		}
	}
	if err := d.end(t); err != nil {
		return nil, err
	}
	if t == AUTH {
		return &Auth{ReasonCode: code, Props: props}, nil
	}
	return &Disconnect{ReasonCode: code, Props: props}, nil
}

// reasonSet is a set of byte values.
type reasonSet [4]uint64

func codeSet(codes ...byte) reasonSet {
	var s reasonSet
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

func (s *reasonSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
