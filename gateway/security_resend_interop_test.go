package gateway_test

import (
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestSecurityReleasedQoS2RealClients: real clients resuming a session
// whose QoS 2 message was denied in flight (TestSecurityReloadReleasesStartedQoS2)
// answer the PUBREL for a packet id they never got a PUBLISH for with a
// PUBCOMP [MQTT-4.3.3-11], [MQTT-4.3.3-2](3.1.1), so the flow ends, and
// they go on receiving what they may read; the denied message never
// reaches them (they never got it: TestSecurityReleasedQoS2HeldByClient
// for one that did).
func TestSecurityReleasedQoS2RealClients(t *testing.T) {
	needMosquittoClients(t)
	for _, tc := range []struct {
		name string
		v    packet.Version
		run  func(t *testing.T, b *broker, id string) (received func() []string)
	}{
		{"mosquitto_sub 3.1.1", packet.V311, func(t *testing.T, b *broker, id string) func() []string {
			s := startMosqSub(t, b, args([]string{"-c", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "1"}, user("alice"))...)
			return func() []string { return s.wait(t) }
		}},
		{"mosquitto_sub 5", packet.V5, func(t *testing.T, b *broker, id string) func() []string {
			s := startMosqSub(t, b, args([]string{"-V", "mqttv5", "-c", "-x", "3600", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "1"}, user("alice"))...)
			return func() []string { return s.wait(t) }
		}},
		{"paho 3.1.1", packet.V311, func(t *testing.T, b *broker, id string) func() []string {
			var got collector
			pahoClient(t, b.addr, id, false, func(o *mqtt.ClientOptions) {
				o.SetUsername("alice").SetPassword(issue13Users["alice"]).SetDefaultPublishHandler(got.handle)
			})
			return func() []string {
				testutil.Eventually(t, 10*time.Second, "the marker", func() bool { return got.len() >= 1 })
				return got.payloads()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, files := secureBroker(t, false)
			id := "alice-real-" + tc.v.String()
			inflightAfterDrop(t, b, id, 2, tc.v)
			denyPublic(t, files)
			pub := bobPublisher(t, b, id+"-bob2")
			received := tc.run(t, b, id)
			testutil.Eventually(t, 10*time.Second, "the client resumed", func() bool { _, d := sessions(b); return d == 0 })
			// The PUBREL was answered: nothing is left in flight.
			testutil.Eventually(t, 10*time.Second, "the released flow ended", func() bool { return b.srv.Stats().Inflight == 0 })
			pub(2, "shared/end", "end")
			got := received()
			if len(got) != 1 || (got[0] != "shared/end end" && got[0] != "end") {
				t.Fatalf("received %q, want only the marker", got)
			}
		})
	}
}
