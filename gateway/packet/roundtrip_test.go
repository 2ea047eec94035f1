package packet_test

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
	"testing/iotest"

	"pgregory.net/rapid"

	"github.com/edgegw/edgegw/gateway/packet"
)

// TestRoundTrip: decode(encode(p)) == p for every packet type at every level.
func TestRoundTrip(t *testing.T) {
	dirty := new(packet.Scratch)
	for _, v := range levels {
		for _, typ := range typesFor(v) {
			t.Run(v.String()+"/"+typ.String(), func(t *testing.T) {
				rapid.Check(t, func(rt *rapid.T) {
					p := genPacket(rt, typ, v)
					b, err := packet.Append(nil, p, v)
					if err != nil {
						rt.Fatalf("Append(%#v): %v", p, err)
					}
					if n := packet.Size(p, v); n != len(b) {
						rt.Fatalf("Size = %d, encoded %d bytes", n, len(b))
					}
					dv := v
					if typ == packet.CONNECT {
						dv = 0
					}
					got, err := packet.Decode(bufio.NewReader(iotest.HalfReader(bytes.NewReader(b))), dv, len(b))
					if err != nil {
						rt.Fatalf("Decode(% x): %v", b, err)
					}
					if !reflect.DeepEqual(got, p) {
						rt.Fatalf("round trip mismatch\n got %#v\nwant %#v\nbytes % x", got, p, b)
					}
					got2, n, err := packet.DecodeBytes(b, dv, 0)
					if err != nil || n != len(b) || !reflect.DeepEqual(got2, p) {
						rt.Fatalf("DecodeBytes = %#v, %d, %v", got2, n, err)
					}
					// DecodeInto, with the packet split across reads and
					// whole in the buffer, and a scratch left dirty by the
					// previous packet.
					for _, r := range []*bufio.Reader{
						bufio.NewReader(iotest.HalfReader(bytes.NewReader(b))),
						bufio.NewReaderSize(bytes.NewReader(b), len(b)+16),
					} {
						got3, err := packet.DecodeInto(r, dv, len(b), dirty)
						if err != nil || !reflect.DeepEqual(got3, p) {
							rt.Fatalf("DecodeInto = %#v, %v\nwant %#v", got3, err, p)
						}
					}
				})
			})
		}
	}
}

// TestDecodeIntoLargePublish: a PUBLISH from 1 KiB on, whose payload
// DecodeInto reads into an allocation of its own, decodes as Decode does
// (also when its header is corrupt or it is cut short), at every level,
// with the header whole in the buffer or arriving in pieces.
func TestDecodeIntoLargePublish(t *testing.T) {
	dirty := new(packet.Scratch)
	for _, v := range levels {
		t.Run(v.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				p := genPacket(rt, packet.PUBLISH, v).(*packet.Publish)
				p.Payload = rapid.SliceOfN(rapid.Byte(), 900, 5000).Draw(rt, "payload")
				b, err := packet.Append(nil, p, v)
				if err != nil {
					rt.Fatalf("Append: %v", err)
				}
				// Corrupt one byte of the first 16 (fixed and variable
				// header) or cut the packet short, sometimes.
				switch rapid.IntRange(0, 3).Draw(rt, "mutation") {
				case 1:
					i := rapid.IntRange(1, min(16, len(b)-1)).Draw(rt, "at")
					b[i] = rapid.Byte().Draw(rt, "byte")
				case 2:
					b = b[:rapid.IntRange(1, len(b)-1).Draw(rt, "cut")]
				}
				want, werr := packet.Decode(bufio.NewReader(bytes.NewReader(b)), v, 0)
				for _, r := range []*bufio.Reader{
					bufio.NewReaderSize(bytes.NewReader(b), 16),
					bufio.NewReader(iotest.HalfReader(bytes.NewReader(b))),
					bufio.NewReaderSize(bytes.NewReader(b), len(b)+16),
				} {
					got, err := packet.DecodeInto(r, v, 0, dirty)
					if errText(err) != errText(werr) {
						rt.Fatalf("DecodeInto error %v, Decode %v", err, werr)
					}
					if werr == nil && !reflect.DeepEqual(got, want) {
						rt.Fatalf("DecodeInto = %#v\nDecode = %#v", got, want)
					}
					if gp, ok := got.(*packet.Publish); ok && len(gp.Payload) > 0 && cap(gp.Payload) != len(gp.Payload) {
						rt.Fatalf("payload cap %d > len %d: appending could write into shared memory", cap(gp.Payload), len(gp.Payload))
					}
				}
			})
		})
	}
}
