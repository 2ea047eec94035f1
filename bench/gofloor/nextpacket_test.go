//go:build linux

package main

import (
	"bytes"
	"testing"
)

// TestNextPacketWaitsForWholePacket: the event loop handles a packet only
// once all of it is read, whatever the cut (a remaining length of two
// bytes included), and splits packets that came in one read.
func TestNextPacketWaitsForWholePacket(t *testing.T) {
	ping := []byte{0xc0, 0}
	pub := append([]byte{0x32, 0x80, 0x01}, bytes.Repeat([]byte{'x'}, 128)...) // remaining length 128
	for cut := range len(pub) {
		if _, rest, ok := nextPacket(pub[:cut]); ok || len(rest) != cut {
			t.Fatalf("cut at %d of %d: ok %v, rest %d bytes; want to wait for the rest", cut, len(pub), ok, len(rest))
		}
	}
	in := append(append(append([]byte{}, ping...), pub...), ping...)
	for i, want := range [][]byte{ping, pub, ping} {
		pk, rest, ok := nextPacket(in)
		if !ok || !bytes.Equal(pk, want) {
			t.Fatalf("packet %d: ok %v, %d bytes; want %d", i, ok, len(pk), len(want))
		}
		in = rest
	}
	if len(in) != 0 {
		t.Fatalf("%d bytes left over", len(in))
	}
}
