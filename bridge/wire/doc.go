// Package wire is the bridge uplink's wire: a packet-level MQTT connection
// over a net.Conn, for the session engine (bridge/session) to drive.
//
// A Conn has one reader (the engine's reader goroutine calls Read) and one
// writer goroutine that owns the socket's writes; everyone else enqueues.
// Writes are batched: packets queued while a write is in the kernel go out
// together in the next one. Every write has a deadline of the write
// timeout for each chunk it makes progress on, so a stuck write (a
// half-open peer that stopped reading: field report 003) breaks the
// connection within that timeout. Packets go in one of two lanes: data
// (PUBLISH, SUBSCRIBE, ...; Send waits while too many bytes are queued)
// and control (PINGREQ and the acks; SendControl never waits and is
// written before the queued data), so a PINGREQ never waits behind a
// backlog of publishes.
//
// Both protocol versions are spoken in one neutral packet type, the
// project's codec gateway/packet: the engine sees *packet.Publish,
// *packet.Puback, ... whatever the version. MQTT 5 is encoded and decoded
// by gateway/packet itself; MQTT 3.1.1 (Codec311) by gateway/packet too for
// the packets of every message (PUBLISH, its acks, PINGREQ), which it
// writes exactly as paho does, and by eclipse/paho.mqtt.golang's public
// packets package for the rest, mapped to and from the neutral types.
//
// The transport is the caller's net.Conn; for ws:// and wss:// DialWebSocket
// opens one through paho's WebSocket transport (websocket.go).
package wire
