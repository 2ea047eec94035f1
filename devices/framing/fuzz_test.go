package framing

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// refDecode is an independent, obviously-correct COBS decoder used as the
// oracle for the fuzz targets.
func refDecode(enc []byte) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(enc); {
		code := int(enc[i])
		if code == 0 || i+code > len(enc) {
			return nil, false
		}
		for j := i + 1; j < i+code; j++ {
			if enc[j] == 0 {
				return nil, false
			}
			out = append(out, enc[j])
		}
		i += code
		if code < 0xFF && i < len(enc) {
			out = append(out, 0)
		}
	}
	return out, len(enc) > 0
}

// refPackets returns the packets a correct Reader must return for input.
func refPackets(input []byte, maxFrame int) [][]byte {
	var out [][]byte
	segs := bytes.Split(input, []byte{0})
	for _, seg := range segs[:len(segs)-1] { // the last segment is unterminated
		if len(seg) == 0 || len(seg) > maxFrame {
			continue
		}
		dec, ok := refDecode(seg)
		if !ok || len(dec) < 3 {
			continue
		}
		pkt := dec[:len(dec)-2]
		if crcBitwise(pkt) == uint16(dec[len(dec)-2])<<8|uint16(dec[len(dec)-1]) {
			out = append(out, pkt)
		}
	}
	return out
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frames(publishQ0, pingreq), uint16(0), uint8(0))
	f.Add(append([]byte("garbage\x00\x01\x00"), frames(mqttPacket(0x10, 14))...), uint16(40), uint8(3))
	f.Add(append(bytes.Repeat([]byte{0x41}, 300), frames(pingreq)...), uint16(64), uint8(1))
	f.Add(append([]byte{0xFF}, seq(1, 254)...), uint16(300), uint8(2))
	f.Fuzz(func(t *testing.T, input []byte, maxFrame uint16, split uint8) {
		mf := max(int(maxFrame), MinMaxFrame)
		want := refPackets(input, mf)
		var r io.Reader = bytes.NewReader(input)
		switch split % 4 {
		case 1:
			r = iotest.OneByteReader(r)
		case 2:
			r = iotest.HalfReader(r)
		case 3: // two pieces, split at a point chosen by the input
			k := int(split) % (len(input) + 1)
			r = &chunkReader{chunks: [][]byte{input[:k], input[k:]}}
		}
		fr := NewReader(r, mf)
		var got [][]byte
		for {
			p, err := fr.ReadFrame()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p) == 0 {
				t.Fatal("empty packet returned")
			}
			got = append(got, append([]byte(nil), p...))
			if cap(fr.frame) > mf {
				t.Fatalf("frame buffer %d > max frame %d", cap(fr.frame), mf)
			}
		}
		if !equalPackets(got, want) {
			t.Fatalf("reader returned %x\noracle expects %x", got, want)
		}
		if s := fr.Stats(); int(s.Good) != len(got) {
			t.Fatalf("Good = %d, returned %d", s.Good, len(got))
		}
		if len(fr.rbuf) > 4096 || cap(fr.frame) > mf {
			t.Fatalf("memory not bounded: rbuf %d frame %d", len(fr.rbuf), cap(fr.frame))
		}
	})
}

// FuzzStreamSplit builds a valid MQTT packet stream from the input, writes it
// through a Conn in chunks chosen by the input, and checks that exactly one
// good frame per packet comes out.
func FuzzStreamSplit(f *testing.F) {
	f.Add([]byte{0x10, 14, 0xC0, 0, 0x30, 200, 1}, []byte{1, 2, 3})
	f.Add([]byte{0x30, 0xFF, 0x32, 0x80, 0xE0, 0}, []byte{0})
	f.Add([]byte{0x82, 7, 0x90, 3, 0xD0, 0}, []byte{5, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, spec, cuts []byte) {
		// spec: pairs (first byte, length code); lengths up to ~2000 cover
		// one- and two-byte remaining lengths.
		var pkts [][]byte
		var stream []byte
		for i := 0; i+1 < len(spec) && len(pkts) < 32; i += 2 {
			first := spec[i]
			if first>>4 == 0 {
				first |= 0x30 // type 0 is reserved
			}
			n := int(spec[i+1])
			if n >= 128 {
				n = (n - 128) * 16
			}
			p := mqttPacket(first, n)
			pkts = append(pkts, p)
			stream = append(stream, p...)
		}
		port := &bufRWC{in: bytes.NewReader(nil)}
		c := NewConn(port, Config{MaxFrame: 4096})
		for i := 0; len(stream) > 0; i++ {
			k := len(stream)
			if i < len(cuts) {
				k = min(int(cuts[i])+1, len(stream))
			}
			if n, err := c.Write(stream[:k]); err != nil || n != k {
				t.Fatalf("Write(%d) = %d, %v", k, n, err)
			}
			stream = stream[k:]
		}
		if port.writes != len(pkts) {
			t.Fatalf("%d frames for %d packets", port.writes, len(pkts))
		}
		fr := NewReader(&port.out, 4096)
		if got := readAll(t, fr); !equalPackets(got, pkts) {
			t.Fatalf("frames differ from packets")
		}
		if fr.Stats().Dropped() != 0 {
			t.Fatalf("dropped: %+v", fr.Stats())
		}
	})
}
