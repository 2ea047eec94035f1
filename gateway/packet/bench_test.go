package packet_test

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/edgegw/edgegw/gateway/packet"
)

func benchPublish() *packet.Publish {
	return &packet.Publish{QoS: 1, PacketID: 42, Topic: "sensors/room1/temperature", Payload: bytes.Repeat([]byte{'x'}, 64)}
}

func BenchmarkEncodePublish64(b *testing.B) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		b.Run("v"+v.String(), func(b *testing.B) {
			p := benchPublish()
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(packet.Size(p, v)))
			for b.Loop() {
				var err error
				dst, err = packet.Append(dst[:0], p, v)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodePublish64(b *testing.B) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		b.Run("v"+v.String(), func(b *testing.B) {
			enc, err := packet.Append(nil, benchPublish(), v)
			if err != nil {
				b.Fatal(err)
			}
			br := bytes.NewReader(enc)
			r := bufio.NewReader(br)
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				br.Reset(enc)
				r.Reset(br)
				if _, err := packet.Decode(r, v, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
