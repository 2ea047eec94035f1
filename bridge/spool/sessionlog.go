package spool

// The session log's format (session.log in the spool directory): what
// the uplink's session engine (bridge/session) keeps beside the records,
// the outbound QoS 2 flows it started.
//
//	header   "EGSS" magic, version uint32 (little endian)
//	entries  length uint32, crc32c uint32 of the body, body:
//	         kind byte, then by kind
//	           sessSent         record uint64, packet id uint16
//	           sessReleased     record uint64
//	           sessResetFlows   (nothing)
//
// The log is replayed in order; a torn or corrupt tail (a crash in the
// middle of an append) ends it and is cut off. A newer version adds
// kinds or versions; it reads the older files.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

const (
	sessMagic      = "EGSS"
	sessVersion    = 1
	sessHeaderSize = 8
	sessFileName   = "session.log"
	sessTmpName    = "session.log.tmp"
	sessEntryHead  = 8 // length + crc
	sessMaxBody    = 1 + 8 + 2
)

// Session log entry kinds.
const (
	sessSent byte = iota + 1
	sessReleased
	sessResetFlows
)

// sessEntry is one decoded entry.
type sessEntry struct {
	kind byte
	rec  uint64
	id   uint16
}

// sessBodySize is the body size of an entry of kind (0: unknown kind).
func sessBodySize(kind byte) int {
	switch kind {
	case sessSent:
		return 1 + 8 + 2
	case sessReleased:
		return 1 + 8
	case sessResetFlows:
		return 1
	}
	return 0
}

// appendSessEntry appends e's encoding to dst.
func appendSessEntry(dst []byte, e sessEntry) []byte {
	n := sessBodySize(e.kind)
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, e.kind)
	switch e.kind {
	case sessSent:
		dst = binary.LittleEndian.AppendUint64(dst, e.rec)
		dst = binary.LittleEndian.AppendUint16(dst, e.id)
	case sessReleased:
		dst = binary.LittleEndian.AppendUint64(dst, e.rec)
	}
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+sessEntryHead:], castagnoli))
	return dst
}

// appendSessHeader appends the file header.
func appendSessHeader(dst []byte) []byte {
	dst = append(dst, sessMagic...)
	return binary.LittleEndian.AppendUint32(dst, sessVersion)
}

var errSessHeader = errors.New("session log: bad header")

// decodeSessLog decodes a whole session log file: its entries, and the
// length of its valid prefix (what follows is a torn or corrupt tail).
// A file whose header is bad yields an error.
func decodeSessLog(b []byte) (entries []sessEntry, valid int, err error) {
	if len(b) < sessHeaderSize || string(b[:4]) != sessMagic {
		return nil, 0, errSessHeader
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v == 0 || v > sessVersion {
		return nil, 0, errSessHeader
	}
	off := sessHeaderSize
	for {
		e, n, ok := decodeSessEntry(b[off:])
		if !ok {
			return entries, off, nil
		}
		entries = append(entries, e)
		off += n
	}
}

// decodeSessEntry decodes the entry at the start of b: false if b does
// not start with a whole, valid one.
func decodeSessEntry(b []byte) (sessEntry, int, bool) {
	if len(b) < sessEntryHead+1 {
		return sessEntry{}, 0, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 1 || n > sessMaxBody || len(b) < sessEntryHead+n {
		return sessEntry{}, 0, false
	}
	body := b[sessEntryHead : sessEntryHead+n]
	if binary.LittleEndian.Uint32(b[4:]) != crc32.Checksum(body, castagnoli) {
		return sessEntry{}, 0, false
	}
	e := sessEntry{kind: body[0]}
	if sessBodySize(e.kind) != n {
		return sessEntry{}, 0, false
	}
	switch e.kind {
	case sessSent:
		e.rec = binary.LittleEndian.Uint64(body[1:])
		e.id = binary.LittleEndian.Uint16(body[9:])
	case sessReleased:
		e.rec = binary.LittleEndian.Uint64(body[1:])
	}
	if (e.kind == sessSent || e.kind == sessReleased) && e.rec == 0 {
		return sessEntry{}, 0, false
	}
	return e, sessEntryHead + n, true
}
