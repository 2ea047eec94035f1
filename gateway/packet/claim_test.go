package packet_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/edgegw/edgegw/gateway/packet"
)

// claimHeader is a PUBLISH fixed header announcing n remaining bytes.
func claimHeader(n int) []byte {
	hdr := []byte{0x30}
	for ; ; n >>= 7 {
		if n < 0x80 {
			return append(hdr, byte(n))
		}
		hdr = append(hdr, byte(n)|0x80)
	}
}

// TestClaimedLengthNotAllocated: a header claiming just under the limit,
// followed by a few bytes and the end of the stream, costs what arrived,
// not what was claimed (issue 13 point 6: 500 such clients put 529 MB
// through the heap when the claim was allocated up front).
func TestClaimedLengthNotAllocated(t *testing.T) {
	const claim = 1<<20 - 16
	in := append(claimHeader(claim), "\x00\x01ta few bytes"...)
	for _, tc := range []struct {
		name   string
		decode func(r *bufio.Reader) error
	}{
		{"Decode", func(r *bufio.Reader) error {
			_, err := packet.Decode(r, packet.V311, 1<<20)
			return err
		}},
		{"DecodeInto", func(r *bufio.Reader) error {
			var s packet.Scratch
			_, err := packet.DecodeInto(r, packet.V311, 1<<20, &s)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bytes.NewReader(in)
			r := bufio.NewReader(br)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range 50 {
				br.Reset(in)
				r.Reset(br)
				if err := tc.decode(r); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("decode: %v, want unexpected EOF", err)
				}
			}
			runtime.ReadMemStats(&after)
			if perRun := (after.TotalAlloc - before.TotalAlloc) / 50; perRun > 16<<10 {
				t.Errorf("%d bytes allocated per truncated 1 MiB claim, want < 16 KiB", perRun)
			}
		})
	}
}

// TestBodyArrivingInPieces: bodies of every size around the growth steps
// decode whole and exact when the stream delivers them a little at a time.
func TestBodyArrivingInPieces(t *testing.T) {
	for _, n := range []int{3, 4095, 4096, 4097, 8192, 8193, 70000, 1 << 20} {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			p := &packet.Publish{Topic: "a/b", QoS: 1, PacketID: 7, Payload: bytes.Repeat([]byte{0xA5}, n)}
			p.Payload[n-1] = 0x5A
			b, err := packet.Append(nil, p, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"Decode", "DecodeInto"} {
				r := bufio.NewReaderSize(iotest.HalfReader(bytes.NewReader(b)), 512)
				var got packet.Packet
				if name == "Decode" {
					got, err = packet.Decode(r, v, 0)
				} else {
					got, err = packet.DecodeInto(r, v, 0, &packet.Scratch{})
				}
				if err != nil {
					t.Fatalf("%s %v payload %d: %v", name, v, n, err)
				}
				gp := got.(*packet.Publish)
				if gp.Topic != "a/b" || gp.PacketID != 7 || !bytes.Equal(gp.Payload, p.Payload) {
					t.Fatalf("%s %v payload %d: decoded %q id %d, %d payload bytes", name, v, n, gp.Topic, gp.PacketID, len(gp.Payload))
				}
				if cap(gp.Payload) > len(gp.Payload)+16 && n >= 1024 {
					t.Errorf("%s %v payload %d: capacity %d, the kept buffer should be exact", name, v, n, cap(gp.Payload))
				}
			}
		}
	}
}
