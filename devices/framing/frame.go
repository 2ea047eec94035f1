package framing

// Design note. The Reader owns two buffers: a fixed read buffer that absorbs
// whatever the port returns, and a frame buffer that collects the bytes of the
// current frame up to the delimiter. The frame buffer grows on demand but never
// beyond maxFrame: a frame that would exceed it is abandoned and the Reader
// discards input until the next 0x00 (the Oversize counter). COBS decoding and
// CRC checking happen in place in the frame buffer, so a steady stream of
// frames allocates nothing. All state survives an error from the underlying
// reader, so a read deadline that expires mid-frame loses nothing.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// DefaultMaxFrame is the default bound on a frame's encoded size (the bytes
// between two 0x00 delimiters), 64 KiB.
const DefaultMaxFrame = 64 << 10

// MinMaxFrame is the smallest accepted maximum frame size: the largest MQTT
// control packet that carries no payload (4 bytes) needs 7 encoded bytes.
const MinMaxFrame = 8

// crcLen is the size of the CRC trailer inside the frame.
const crcLen = 2

// ErrFrameTooLarge is returned by Writer.WriteFrame and Conn.Write for a
// packet whose frame would exceed the maximum frame size.
var ErrFrameTooLarge = errors.New("framing: frame too large")

// MaxPacketLen returns the largest packet that fits in a frame of at most
// maxFrame encoded bytes whatever its content (COBS worst case).
func MaxPacketLen(maxFrame int) int {
	n := maxFrame
	for n > 0 && MaxEncodedLen(n) > maxFrame {
		n--
	}
	return max(n-crcLen, 0)
}

// AppendFrame appends one complete frame carrying packet to dst:
// COBS(packet || CRC16(packet) big-endian) followed by 0x00.
func AppendFrame(dst, packet []byte) []byte {
	crc := CRC16(packet)
	// Encode packet and CRC as one COBS run without copying the packet:
	// the CRC bytes are encoded by continuing the last block.
	return append(appendEncode2(dst, packet, [crcLen]byte{byte(crc >> 8), byte(crc)}), 0)
}

// appendEncode2 is AppendEncode of a || b for a short b, without a temporary.
func appendEncode2(dst, a []byte, b [crcLen]byte) []byte {
	codeAt := len(dst)
	dst = append(dst, 0)
	code := byte(1)
	n := len(a) + len(b)
	for i := range n {
		var c byte
		if i < len(a) {
			c = a[i]
		} else {
			c = b[i-len(a)]
		}
		if c == 0 {
			dst[codeAt] = code
			codeAt = len(dst)
			dst = append(dst, 0)
			code = 1
			continue
		}
		dst = append(dst, c)
		code++
		if code == 0xFF {
			dst[codeAt] = code
			code = 1
			if i == n-1 {
				return dst
			}
			codeAt = len(dst)
			dst = append(dst, 0)
		}
	}
	dst[codeAt] = code
	return dst
}

// Stats counts the frames a Reader has seen. Dropped frames are never
// returned to the caller.
type Stats struct {
	Good     uint64 // frames returned to the caller
	BadCRC   uint64 // dropped: CRC mismatch
	BadCOBS  uint64 // dropped: malformed COBS encoding
	Oversize uint64 // dropped: longer than the maximum frame size
	Short    uint64 // dropped: decoded to fewer than 3 bytes (no packet and CRC)
}

// Dropped returns the number of frames dropped for any reason.
func (s Stats) Dropped() uint64 { return s.BadCRC + s.BadCOBS + s.Oversize + s.Short }

type counters struct {
	good, badCRC, badCOBS, oversize, short atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Good:     c.good.Load(),
		BadCRC:   c.badCRC.Load(),
		BadCOBS:  c.badCOBS.Load(),
		Oversize: c.oversize.Load(),
		Short:    c.short.Load(),
	}
}

// Reader reads cobs-crc16 frames from an io.Reader and returns the packets of
// the good ones. Empty frames (consecutive 0x00 bytes) are ignored silently:
// senders may use them as padding or to flush a receiver. A Reader is not
// safe for concurrent ReadFrame calls; Stats may be called from any
// goroutine.
type Reader struct {
	r        io.Reader
	maxFrame int
	rbuf     []byte // fixed-size read buffer
	rpos     int    // unconsumed input is rbuf[rpos:rend]
	rend     int
	frame    []byte // current frame bytes, len <= maxFrame
	skipping bool   // discarding an oversize frame until the next 0x00
	stats    counters
}

// NewReader returns a Reader over r that drops frames longer than maxFrame
// encoded bytes (excluding the delimiter). maxFrame <= 0 selects
// DefaultMaxFrame; values below MinMaxFrame are raised to it.
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	maxFrame = max(maxFrame, MinMaxFrame)
	return &Reader{
		r:        r,
		maxFrame: maxFrame,
		rbuf:     make([]byte, min(maxFrame+1, 4096)),
	}
}

// Stats returns a snapshot of the frame counters.
func (fr *Reader) Stats() Stats { return fr.stats.snapshot() }

// MaxFrame returns the maximum encoded frame size.
func (fr *Reader) MaxFrame() int { return fr.maxFrame }

// ReadFrame returns the packet of the next good frame, with its CRC verified
// and stripped. The returned slice is valid only until the next call to
// ReadFrame. Bad frames are counted and skipped. Errors from the underlying
// reader are returned as is (io.EOF at the end of the stream; bytes of an
// unterminated last frame are discarded); after a temporary error such as an
// expired deadline, ReadFrame may be called again and continues where it left
// off.
func (fr *Reader) ReadFrame() ([]byte, error) {
	for {
		if fr.rpos == fr.rend {
			n, err := fr.r.Read(fr.rbuf)
			if n < 0 || n > len(fr.rbuf) {
				return nil, fmt.Errorf("framing: invalid read count %d", n)
			}
			fr.rpos, fr.rend = 0, n
			if n == 0 {
				if err == nil {
					continue
				}
				if errors.Is(err, io.EOF) {
					fr.frame, fr.skipping = fr.frame[:0], false
				}
				return nil, err
			}
			// Bytes first, error next call (io.Reader contract): a
			// non-nil err with n > 0 is rare and the next Read repeats it.
		}
		in := fr.rbuf[fr.rpos:fr.rend]
		i := bytes.IndexByte(in, 0)
		if i < 0 {
			fr.rpos = fr.rend
			fr.collect(in)
			continue
		}
		fr.rpos += i + 1
		fr.collect(in[:i])
		if pkt, ok := fr.finish(); ok {
			return pkt, nil
		}
	}
}

// collect adds bytes of the current frame, switching to skipping mode when
// the frame would exceed maxFrame. It never grows the buffer beyond maxFrame.
func (fr *Reader) collect(b []byte) {
	if fr.skipping || len(b) == 0 {
		return
	}
	if len(fr.frame)+len(b) > fr.maxFrame {
		fr.skipping = true
		fr.frame = fr.frame[:0]
		return
	}
	if need := len(fr.frame) + len(b); need > cap(fr.frame) {
		nb := make([]byte, len(fr.frame), min(max(need, 2*cap(fr.frame), 256), fr.maxFrame))
		copy(nb, fr.frame)
		fr.frame = nb
	}
	fr.frame = append(fr.frame, b...)
}

// finish ends the current frame at a delimiter and reports its packet if good.
func (fr *Reader) finish() ([]byte, bool) {
	f := fr.frame
	fr.frame = fr.frame[:0]
	if fr.skipping {
		fr.skipping = false
		fr.stats.oversize.Add(1)
		return nil, false
	}
	if len(f) == 0 {
		return nil, false // empty frame: padding, not an error
	}
	dec, err := AppendDecode(f[:0], f) // in place
	if err != nil {
		fr.stats.badCOBS.Add(1)
		return nil, false
	}
	if len(dec) <= crcLen {
		fr.stats.short.Add(1)
		return nil, false
	}
	pkt := dec[:len(dec)-crcLen]
	if CRC16(pkt) != uint16(dec[len(dec)-2])<<8|uint16(dec[len(dec)-1]) {
		fr.stats.badCRC.Add(1)
		return nil, false
	}
	fr.stats.good.Add(1)
	return pkt, true
}

// Writer writes cobs-crc16 frames to an io.Writer. Before its first frame it
// writes a single 0x00, so a receiver discards whatever line noise it has
// collected instead of prefixing it to the first frame. A Writer is not safe
// for concurrent use.
type Writer struct {
	w        io.Writer
	maxFrame int
	buf      []byte // reused frame buffer
	started  bool
}

// NewWriter returns a Writer that refuses packets whose frame would exceed
// maxFrame encoded bytes (<= 0 selects DefaultMaxFrame).
func NewWriter(w io.Writer, maxFrame int) *Writer {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &Writer{w: w, maxFrame: max(maxFrame, MinMaxFrame)}
}

// WriteFrame writes packet as one frame with a single Write call. It returns
// ErrFrameTooLarge, writing nothing, if the frame would exceed the maximum
// frame size.
func (fw *Writer) WriteFrame(packet []byte) error {
	if len(packet)+crcLen+1 > fw.maxFrame {
		return ErrFrameTooLarge // cannot fit whatever the content
	}
	lead := 0
	b := fw.buf[:0]
	if !fw.started {
		b = append(b, 0)
		lead = 1
	}
	b = AppendFrame(b, packet)
	fw.buf = b
	if len(b)-lead-1 > fw.maxFrame {
		return ErrFrameTooLarge
	}
	if _, err := fw.w.Write(b); err != nil {
		return fmt.Errorf("framing: write frame: %w", err)
	}
	fw.started = true
	return nil
}
