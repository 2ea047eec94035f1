package wire

import (
	"bufio"
	"fmt"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Codec encodes and decodes one protocol version's packets in the
// neutral type (gateway/packet).
type Codec interface {
	// Version is the protocol level the codec speaks (packet.V311 or
	// packet.V5).
	Version() packet.Version
	// Append appends p's wire form to dst.
	Append(dst []byte, p packet.Packet) ([]byte, error)
	// Decode reads one packet from r, refusing one larger than maxSize
	// bytes (0: the protocol's maximum) before reading its body.
	Decode(r *bufio.Reader, maxSize int) (packet.Packet, error)
}

// Codec5 is MQTT 5 through gateway/packet.
type Codec5 struct{}

// Version implements Codec.
func (Codec5) Version() packet.Version { return packet.V5 }

// Append implements Codec.
func (Codec5) Append(dst []byte, p packet.Packet) ([]byte, error) {
	b, err := packet.Append(dst, p, packet.V5)
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", p.Type(), err)
	}
	return b, nil
}

// Decode implements Codec.
func (Codec5) Decode(r *bufio.Reader, maxSize int) (packet.Packet, error) {
	return packet.Decode(r, packet.V5, maxSize)
}

// For returns the codec of protocol level v: Codec5 for packet.V5,
// Codec311 otherwise.
func For(v packet.Version) Codec {
	if v == packet.V5 {
		return Codec5{}
	}
	return Codec311{}
}
