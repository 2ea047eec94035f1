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
