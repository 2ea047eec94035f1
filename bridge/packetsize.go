package bridge

// The size of a PUBLISH on the wire, exactly, for the broker's packet size
// limit (Config.MaxPacketSize, an MQTT 5 CONNACK's Maximum Packet Size):
// the limit counts the whole packet, fixed header included (MQTT 5
// 3.2.2.3.6; a client must not send more [MQTT-3.2.2-15]), and a message dropped for a limit it would have fitted
// is a message lost. (publishSize, window.go, is the send window's
// estimate: it counts 5 bytes of fixed header whatever the length.)

import "github.com/edgegw/edgegw/bridge/spool"

// packetSize returns the size of a packet whose remaining length is rl:
// one byte of packet type and flags, the remaining length as a variable
// byte integer of 1 to 4 bytes (MQTT 5 1.5.5, 3.1.1 2.2.3), and rl.
func packetSize(rl int) int {
	n := 2
	for v := rl; v >= 128; v >>= 7 {
		n++
	}
	return n + rl
}

// publishSize311 is the size of m's MQTT 3.1.1 PUBLISH: the topic with its
// 2-byte length, a packet id for QoS 1 and 2, and the payload (3.3.2,
// 3.3.3 in 3.1.1), as the engine's wire encodes it (wire.Codec311).
func publishSize311(m spool.Message) int {
	rl := 2 + len(m.Topic) + len(m.Payload)
	if m.QoS > 0 {
		rl += 2
	}
	return packetSize(rl)
}

// publishSize5 is the size of m's MQTT 5 PUBLISH as the bridge sends it:
// as over 3.1.1, plus the properties' length, one byte, for the bridge
// sends none (enginePublish; MQTT 5 3.3.2.3).
func publishSize5(m spool.Message) int {
	rl := 2 + len(m.Topic) + 1 + len(m.Payload)
	if m.QoS > 0 {
		rl += 2
	}
	return packetSize(rl)
}
