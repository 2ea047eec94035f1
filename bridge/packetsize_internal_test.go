package bridge

import (
	"bytes"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/bridge/wire"
)

// TestPublishSizeIsTheWire: the sizes the sender compares with the
// broker's packet size limit are the bytes the engine's wire writes
// (wire.Codec311, wire.Codec5, a PUBLISH as enginePublish builds it), at
// every QoS and across the remaining length's 1/2/3-byte boundaries.
// publishSize, the send window's estimate, is 3 bytes over for a short
// 3.1.1 publish (2 over MQTT 5): compared with the limit, a message that
// fits would be dropped.
func TestPublishSizeIsTheWire(t *testing.T) {
	var payloads []int
	for _, edge := range []int{0, 127, 16383, 2097151} {
		for d := -12; d <= 12; d++ {
			if edge+d >= 0 {
				payloads = append(payloads, edge+d)
			}
		}
	}
	onWire := func(c wire.Codec, m spool.Message) int {
		p := enginePublish(m)
		if m.QoS > 0 {
			p.PacketID = 1
		}
		b, err := c.Append(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	for _, topic := range []string{"t", "site-a/sensors/t1"} {
		for _, n := range payloads {
			for qos := byte(0); qos <= 2; qos++ {
				m := spool.Message{Topic: topic, Payload: bytes.Repeat([]byte{'x'}, n), QoS: qos, Retain: n%2 == 1}
				if got, w := publishSize311(m), onWire(wire.Codec311{}, m); got != w {
					t.Fatalf("3.1.1 QoS %d, topic %d, payload %d: publishSize311 %d, on the wire %d", qos, len(topic), n, got, w)
				}
				if got, w := publishSize5(m), onWire(wire.Codec5{}, m); got != w {
					t.Fatalf("5 QoS %d, topic %d, payload %d: publishSize5 %d, on the wire %d", qos, len(topic), n, got, w)
				}
			}
		}
	}
	m := spool.Message{Topic: "site-a/sensors/t1", Payload: []byte(strings.Repeat("x", 100)), QoS: 1}
	if est, exact := publishSize(m.Topic, len(m.Payload)), publishSize311(m); est != exact+3 {
		t.Fatalf("publishSize %d, exact %d: the comment's 2 bytes are wrong", est, exact)
	}
}
