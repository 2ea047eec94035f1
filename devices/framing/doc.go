// Package framing carries MQTT control packets over a byte-oriented serial
// link.
//
// The default framing, cobs-crc16, sends one MQTT control packet per frame:
//
//	frame = COBS(packet || CRC-16/CCITT-FALSE(packet), big-endian) || 0x00
//
// COBS (Consistent Overhead Byte Stuffing, Cheshire and Baker 1999) removes
// every 0x00 from the encoded bytes, so 0x00 only ever appears as the frame
// delimiter and a receiver that starts mid-stream, or sees a corrupted frame,
// resynchronises at the next 0x00. A frame whose COBS encoding or CRC is wrong,
// or that is longer than the configured maximum, is dropped and counted; it is
// never handed to the caller. The raw framing passes the MQTT byte stream
// through unchanged, for devices that cannot frame.
//
// The package has three layers:
//
//   - AppendEncode, AppendDecode and CRC16: the primitives, allocation free.
//   - Reader and Writer: one good packet in, one frame out.
//   - Conn: a net.Conn that presents a framed link as a plain MQTT byte stream,
//     so an MQTT client or the gateway runs unchanged over a serial port. It
//     splits the written stream into packets by parsing each MQTT fixed header.
//
// The wire format is specified for firmware authors in docs/serial-framing.md;
// the byte examples there are checked by this package's tests.
//
// This package imports only the standard library.
package framing
