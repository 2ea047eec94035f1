package main

import (
	"strings"
	"testing"
)

// TestBinaryOfflineSessionQueuesNoQoS0 holds docs/behaviour.md's "QoS 0
// messages are not queued for disconnected clients", with mosquitto
// clients against the binary: a persistent session that is offline gets,
// when it comes back, the QoS 1 messages published meanwhile and none of
// the messages that would have reached it at QoS 0 (a QoS 0 publish on
// its QoS 1 subscription, a QoS 1 publish on its QoS 0 subscription).
func TestBinaryOfflineSessionQueuesNoQoS0(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := newPersistEnv(t, buildEdgegw(t), "batch")
	e.start()
	// Subscribe, then go offline (-E: exit once subscribed).
	e.run("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "1", "-t", "q1/#", "-E")
	e.run("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "0", "-t", "q0/#", "-E")

	e.run("mosquitto_pub", "-q", "0", "-t", "q1/a", "-m", "qos0-publish")
	e.run("mosquitto_pub", "-q", "1", "-t", "q1/a", "-m", "kept-1")
	e.run("mosquitto_pub", "-q", "1", "-t", "q0/a", "-m", "qos0-subscription")
	e.run("mosquitto_pub", "-q", "2", "-t", "q1/a", "-m", "kept-2")

	// A queue is sent in order: the two kept messages are its whole content
	// exactly when nothing else was queued before or between them.
	out := e.run("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "1", "-t", "q1/#", "-v", "-C", "2", "-W", "20")
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != "q1/a kept-1|q1/a kept-2" {
		t.Fatalf("the session came back to:\n%s\nwant only the QoS 1 and 2 messages (q1/a kept-1, q1/a kept-2)", out)
	}
}
