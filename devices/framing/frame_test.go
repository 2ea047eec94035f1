package framing

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"

	"pgregory.net/rapid"
)

// fataler is the part of testing.TB that rapid.T also has.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// readAll returns every packet ReadFrame yields until io.EOF.
func readAll(t fataler, fr *Reader) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		p, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ReadFrame: %v", err)
		}
		out = append(out, append([]byte(nil), p...))
	}
}

func frames(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = AppendFrame(b, p)
	}
	return b
}

func equalPackets(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

var (
	pingreq   = []byte{0xC0, 0x00}
	publishQ0 = append([]byte{0x30, 0x0B, 0x00, 0x03, 'a', '/', 'b'}, "21.5"...)
)

func TestReaderDropsBadFrames(t *testing.T) {
	good1, good2 := publishQ0, pingreq
	flip := func(b []byte, i int, mask byte) []byte {
		b = append([]byte(nil), b...)
		b[i] ^= mask
		return b
	}
	f1 := AppendFrame(nil, good1)
	tests := []struct {
		name  string
		input []byte
		want  [][]byte
		stats Stats
	}{
		{"clean", frames(good1, good2), [][]byte{good1, good2}, Stats{Good: 2}},
		{"bit flip in payload", append(flip(f1, 5, 0x04), frames(good2)...), [][]byte{good2}, Stats{Good: 1, BadCRC: 1}},
		{"bit flip in crc", append(flip(f1, len(f1)-2, 0x80), frames(good2)...), [][]byte{good2}, Stats{Good: 1, BadCRC: 1}},
		// The code byte 0x0A now points past the delimiter.
		{"bad cobs code", append(flip(f1, 0, 0x70), frames(good2)...), [][]byte{good2}, Stats{Good: 1, BadCOBS: 1}},
		{"garbage prefix", append([]byte("\xff\xfegarbage\x13"), append([]byte{0}, frames(good1)...)...), [][]byte{good1}, Stats{Good: 1, BadCOBS: 1}},
		{"valid cobs garbage prefix", append([]byte("\x03ab\x02c\x00"), frames(good1)...), [][]byte{good1}, Stats{Good: 1, BadCRC: 1}},
		{"garbage prefix without delimiter joins first frame", append([]byte("junk"), frames(good1, good2)...), [][]byte{good2}, Stats{Good: 1, BadCOBS: 1}},
		{"empty frames ignored", append([]byte{0, 0, 0}, append(frames(good1), 0, 0)...), [][]byte{good1}, Stats{Good: 1}},
		{"short frames", append([]byte{0x01, 0x00, 0x02, 0x11, 0x00, 0x03, 0xAA, 0xBB, 0x00}, frames(good2)...), [][]byte{good2}, Stats{Good: 1, Short: 3}},
		{"unterminated tail discarded", append(frames(good1), f1[:len(f1)-1]...), [][]byte{good1}, Stats{Good: 1}},
		{"bit lost", append(append(append([]byte(nil), f1[:3]...), f1[4:]...), frames(good2)...), [][]byte{good2}, Stats{Good: 1, BadCOBS: 1}},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":   func(r io.Reader) io.Reader { return r },
		"onebyte": iotest.OneByteReader,
		"half":    iotest.HalfReader,
		"dataerr": iotest.DataErrReader,
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				fr := NewReader(wrap(bytes.NewReader(tt.input)), 0)
				got := readAll(t, fr)
				if !equalPackets(got, tt.want) {
					t.Fatalf("packets = %x, want %x", got, tt.want)
				}
				if s := fr.Stats(); s != tt.stats {
					t.Fatalf("stats = %+v, want %+v", s, tt.stats)
				}
			})
		}
	}
}

func TestReaderOversize(t *testing.T) {
	const maxFrame = 64
	big := bytes.Repeat([]byte{0x41}, 200)
	fits := bytes.Repeat([]byte{0x42}, MaxPacketLen(maxFrame))
	input := frames(pingreq, big, fits, big, pingreq)
	for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		fr := NewReader(wrap(bytes.NewReader(input)), maxFrame)
		got := readAll(t, fr)
		if want := [][]byte{pingreq, fits, pingreq}; !equalPackets(got, want) {
			t.Fatalf("packets = %x, want %x", got, want)
		}
		if s := fr.Stats(); s != (Stats{Good: 3, Oversize: 2}) {
			t.Fatalf("stats = %+v", s)
		}
		if cap(fr.frame) > maxFrame {
			t.Fatalf("frame buffer grew to %d > max frame %d", cap(fr.frame), maxFrame)
		}
	}
}

// A frame exactly maxFrame encoded bytes long is accepted, one more is not.
func TestReaderOversizeBoundary(t *testing.T) {
	for _, n := range []int{10, 100, 300} {
		f := AppendFrame(nil, bytes.Repeat([]byte{7}, n))
		enc := len(f) - 1
		if got := readAll(t, NewReader(bytes.NewReader(f), enc)); len(got) != 1 {
			t.Fatalf("frame of exactly max size dropped")
		}
		fr := NewReader(bytes.NewReader(f), enc-1)
		if got := readAll(t, fr); len(got) != 0 || fr.Stats().Oversize != 1 {
			t.Fatalf("frame one byte over max accepted: %d packets, %+v", len(got), fr.Stats())
		}
	}
}

func TestReaderResumesAfterTimeout(t *testing.T) {
	f := frames(publishQ0, pingreq)
	fr := NewReader(&chunkReader{chunks: [][]byte{f[:3], f[3:9], f[9:]}, timeouts: true}, 0)
	var got [][]byte
	timeouts := 0
	for {
		p, err := fr.ReadFrame()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			timeouts++
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]byte(nil), p...))
	}
	if !equalPackets(got, [][]byte{publishQ0, pingreq}) || timeouts == 0 {
		t.Fatalf("got %x after %d timeouts", got, timeouts)
	}
}

func TestReaderNoAllocsSteadyState(t *testing.T) {
	one := frames(publishQ0)
	stream := bytes.Repeat(one, 1000)
	r := bytes.NewReader(stream)
	fr := NewReader(r, 0)
	if _, err := fr.ReadFrame(); err != nil { // warm up the buffers
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(500, func() {
		if _, err := fr.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("allocs per ReadFrame = %v, want 0", n)
	}
}

func TestWriterReaderRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxFrame := rapid.IntRange(MinMaxFrame, 2000).Draw(t, "maxFrame")
		pkts := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 1, 1500), 0, 8).Draw(t, "packets")
		var buf bytes.Buffer
		fw := NewWriter(&buf, maxFrame)
		var sent [][]byte
		for _, p := range pkts {
			err := fw.WriteFrame(p)
			if errors.Is(err, ErrFrameTooLarge) {
				if len(p) <= MaxPacketLen(maxFrame) {
					t.Fatalf("packet of %d bytes refused with max frame %d", len(p), maxFrame)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			sent = append(sent, p)
		}
		// Read back with random chunking.
		stream := buf.Bytes()
		var chunks [][]byte
		for len(stream) > 0 {
			n := rapid.IntRange(1, len(stream)).Draw(t, "chunk")
			chunks = append(chunks, stream[:n])
			stream = stream[n:]
		}
		fr := NewReader(&chunkReader{chunks: chunks}, maxFrame)
		got := readAll(t, fr)
		if !equalPackets(got, sent) {
			t.Fatalf("got %d packets, sent %d", len(got), len(sent))
		}
		if s := fr.Stats(); s.Dropped() != 0 {
			t.Fatalf("dropped frames: %+v", s)
		}
	})
}

// chunkReader returns its chunks one Read at a time; with timeouts, a
// deadline error comes before each chunk.
type chunkReader struct {
	chunks   [][]byte
	timeouts bool
	timedOut bool // the last Read returned the deadline error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	if r.timeouts && !r.timedOut {
		r.timedOut = true
		return 0, os.ErrDeadlineExceeded
	}
	r.timedOut = false
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

func TestWriterLeadingDelimiter(t *testing.T) {
	var buf bytes.Buffer
	fw := NewWriter(&buf, 0)
	for range 2 {
		if err := fw.WriteFrame(pingreq); err != nil {
			t.Fatal(err)
		}
	}
	want := append([]byte{0}, frames(pingreq, pingreq)...)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote %x, want %x", buf.Bytes(), want)
	}
}

// Corrupting any single bit of a frame stream loses at most the frames that
// bit touched; every other frame is still read and nothing bad is returned.
func TestReaderSingleBitFlips(t *testing.T) {
	pkts := [][]byte{publishQ0, pingreq, bytes.Repeat([]byte{0x55, 0}, 200), publishQ0}
	stream := frames(pkts...)
	for bit := range len(stream) * 8 {
		in := append([]byte(nil), stream...)
		in[bit/8] ^= 1 << (bit % 8)
		fr := NewReader(bytes.NewReader(in), 0)
		got := readAll(t, fr)
		// CRC-16 detects all 1- and 2-bit errors in frames this short, so
		// every returned packet must be one of the originals.
		for _, p := range got {
			found := false
			for _, q := range pkts {
				found = found || bytes.Equal(p, q)
			}
			if !found {
				t.Fatalf("bit %d: returned corrupt packet %x", bit, p)
			}
		}
		if len(got) < len(pkts)-2 {
			t.Fatalf("bit %d: only %d of %d packets survived", bit, len(got), len(pkts))
		}
		if s := fr.Stats(); int(s.Good) != len(got) {
			t.Fatalf("bit %d: stats %+v for %d packets", bit, s, len(got))
		}
	}
}
