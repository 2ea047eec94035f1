package framing

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func seq(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from + i)
	}
	return b
}

func TestCRC16(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want uint16
	}{
		{"check value", []byte("123456789"), 0x29B1},
		{"empty", nil, 0xFFFF},
		{"single zero", []byte{0}, 0xE1F0},
		{"A", []byte("A"), 0xB915},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CRC16(tt.in); got != tt.want {
				t.Fatalf("CRC16(%q) = %#04x, want %#04x", tt.in, got, tt.want)
			}
		})
	}
	// Incremental use gives the same result as one call.
	if got := UpdateCRC16(UpdateCRC16(CRC16Init, []byte("1234")), []byte("56789")); got != 0x29B1 {
		t.Fatalf("incremental CRC = %#04x", got)
	}
}

// crcBitwise is the specification form, to check the table.
func crcBitwise(data []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, b := range data {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestCRC16MatchesBitwise(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "data")
		if CRC16(b) != crcBitwise(b) {
			t.Fatalf("table and bitwise CRC differ for %x", b)
		}
	})
}

// Vectors from Cheshire and Baker, "Consistent Overhead Byte Stuffing" (1999),
// as tabulated in the COBS literature.
func TestCOBSVectors(t *testing.T) {
	nz254 := seq(1, 254)            // 01..FE
	nz255 := seq(1, 255)            // 01..FF
	mixed := append(seq(2, 254), 0) // 02..FF 00
	tests := []struct {
		name string
		dec  []byte
		enc  []byte
	}{
		{"empty", nil, unhex(t, "01")},
		{"zero", unhex(t, "00"), unhex(t, "0101")},
		{"two zeros", unhex(t, "0000"), unhex(t, "010101")},
		{"11 22 00 33", unhex(t, "11220033"), unhex(t, "0311220233")},
		{"11 22 33 44", unhex(t, "11223344"), unhex(t, "0511223344")},
		{"11 00 00 00", unhex(t, "11000000"), unhex(t, "0211010101")},
		{"254 non-zero", nz254, append([]byte{0xFF}, nz254...)},
		{"00 then 254 non-zero", append([]byte{0}, nz254...), append([]byte{0x01, 0xFF}, nz254...)},
		{"255 non-zero", nz255, append(append([]byte{0xFF}, nz254...), 0x02, 0xFF)},
		{"02..FF 00", mixed, append(append([]byte{0xFF}, seq(2, 254)...), 0x01, 0x01)},
		{"03..FF 00 01", append(seq(3, 253), 0, 1), append(append([]byte{0xFE}, seq(3, 253)...), 0x02, 0x01)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc := AppendEncode(nil, tt.dec)
			if !bytes.Equal(enc, tt.enc) {
				t.Fatalf("encode:\n got %x\nwant %x", enc, tt.enc)
			}
			if len(enc) > MaxEncodedLen(len(tt.dec)) {
				t.Fatalf("encoded %d bytes > MaxEncodedLen %d", len(enc), MaxEncodedLen(len(tt.dec)))
			}
			dec, err := AppendDecode(nil, tt.enc)
			if err != nil || !bytes.Equal(dec, tt.dec) {
				t.Fatalf("decode: got %x, %v; want %x", dec, err, tt.dec)
			}
		})
	}
}

func TestCOBSDecodeErrors(t *testing.T) {
	for _, in := range []string{"", "00", "0311", "031100", "05112233", "0211000100"} {
		t.Run(in, func(t *testing.T) {
			if _, err := AppendDecode(nil, unhex(t, in)); !errors.Is(err, ErrCOBS) {
				t.Fatalf("AppendDecode(%s) err = %v, want ErrCOBS", in, err)
			}
		})
	}
}

func TestCOBSRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Mix zero-heavy and long non-zero inputs to hit every block kind.
		b := rapid.OneOf(
			rapid.SliceOf(rapid.Byte()),
			rapid.SliceOfN(rapid.ByteRange(0, 2), 0, 600),
			rapid.SliceOfN(rapid.ByteRange(1, 255), 0, 1200),
		).Draw(t, "data")
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "prefix")
		enc := AppendEncode(append([]byte(nil), prefix...), b)
		if !bytes.Equal(enc[:len(prefix)], prefix) {
			t.Fatalf("prefix clobbered")
		}
		enc = enc[len(prefix):]
		if bytes.IndexByte(enc, 0) >= 0 {
			t.Fatalf("encoding contains 0x00: %x", enc)
		}
		if len(enc) > MaxEncodedLen(len(b)) {
			t.Fatalf("len %d > MaxEncodedLen(%d) = %d", len(enc), len(b), MaxEncodedLen(len(b)))
		}
		dec, err := AppendDecode(nil, enc)
		if err != nil || !bytes.Equal(dec, b) {
			t.Fatalf("round trip: %x -> %x -> %x, %v", b, enc, dec, err)
		}
		// In place decoding gives the same bytes.
		inPlace, err := AppendDecode(enc[:0], enc)
		if err != nil || !bytes.Equal(inPlace, b) {
			t.Fatalf("in place decode: %x, %v", inPlace, err)
		}
		// AppendFrame is COBS(packet||crc) || 0.
		crc := CRC16(b)
		want := append(AppendEncode(nil, append(append([]byte(nil), b...), byte(crc>>8), byte(crc))), 0)
		if got := AppendFrame(nil, b); !bytes.Equal(got, want) {
			t.Fatalf("AppendFrame = %x, want %x", got, want)
		}
	})
}

func TestCOBSNoAllocs(t *testing.T) {
	src := bytes.Repeat([]byte{1, 2, 0, 3}, 300)
	dst := make([]byte, 0, MaxEncodedLen(len(src))+8)
	dec := make([]byte, 0, len(src))
	if n := testing.AllocsPerRun(100, func() {
		enc := AppendEncode(dst[:0], src)
		if _, err := AppendDecode(dec[:0], enc); err != nil {
			t.Fatal(err)
		}
		_ = AppendFrame(dst[:0], src[:100])
	}); n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}

func TestMaxPacketLen(t *testing.T) {
	for _, mf := range []int{MinMaxFrame, 100, 255, 256, 257, 509, 1000, DefaultMaxFrame} {
		n := MaxPacketLen(mf)
		if MaxEncodedLen(n+crcLen) > mf || MaxEncodedLen(n+1+crcLen) <= mf {
			t.Errorf("MaxPacketLen(%d) = %d is not the largest fitting packet", mf, n)
		}
	}
}
