package bridge

import (
	"bytes"
	"strings"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// TestPublishSizeIsTheWire: the sizes the sender compares with the
// broker's packet size limit are the bytes the encoders write, at every
// QoS and across the remaining length's 1/2/3-byte boundaries: the
// bridge's own 3.1.1 encoder (QoS 0 and 1), paho's (QoS 2), paho.golang's
// for MQTT 5 (a PUBLISH as uplink5 publish builds it). publishSize, the
// send window's estimate, is 3 bytes over for a short 3.1.1 publish (2
// over MQTT 5): compared with the limit (as uplink5 refuse did), a message
// that fits would be dropped.
func TestPublishSizeIsTheWire(t *testing.T) {
	var payloads []int
	for _, edge := range []int{0, 127, 16383, 2097151} {
		for d := -12; d <= 12; d++ {
			if edge+d >= 0 {
				payloads = append(payloads, edge+d)
			}
		}
	}
	for _, topic := range []string{"t", "site-a/sensors/t1"} {
		for _, n := range payloads {
			for qos := byte(0); qos <= 2; qos++ {
				m := spool.Message{Topic: topic, Payload: bytes.Repeat([]byte{'x'}, n), QoS: qos}
				var wire311 int
				if qos < 2 {
					wire311 = len(appendPublish311(nil, m, 1))
				} else {
					p := mqtt.NewControlPacket(mqtt.Publish).(*mqtt.PublishPacket)
					p.Qos, p.TopicName, p.Payload, p.MessageID = 2, topic, m.Payload, 1
					var b bytes.Buffer
					if err := p.Write(&b); err != nil {
						t.Fatal(err)
					}
					wire311 = b.Len()
				}
				if got := publishSize311(m); got != wire311 {
					t.Fatalf("3.1.1 QoS %d, topic %d, payload %d: publishSize311 %d, on the wire %d", qos, len(topic), n, got, wire311)
				}
				m.Retain = n%2 == 1
				pp := publish5(m) // as uplink5 publish sends it
				if qos > 0 {
					pp.PacketID = 1
				}
				p5 := pp.Packet()
				var b bytes.Buffer
				if _, err := p5.WriteTo(&b); err != nil {
					t.Fatal(err)
				}
				if got := publishSize5(m); got != b.Len() {
					t.Fatalf("5 QoS %d, topic %d, payload %d: publishSize5 %d, on the wire %d", qos, len(topic), n, got, b.Len())
				}
			}
		}
	}
	m := spool.Message{Topic: "site-a/sensors/t1", Payload: []byte(strings.Repeat("x", 100)), QoS: 1}
	if est, exact := publishSize(m.Topic, len(m.Payload)), publishSize311(m); est != exact+3 {
		t.Fatalf("publishSize %d, exact %d: the comment's 2 bytes are wrong", est, exact)
	}
}
