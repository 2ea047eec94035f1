package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/store"
)

// stateBroker is a broker whose state lives in dir.
func stateBroker(t *testing.T, dir string, sync store.Sync) (*broker, *store.Store) {
	t.Helper()
	st, loaded, err := store.Open(store.Options{Dir: dir, Sync: sync, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, gateway.Options{AllowAnonymous: true, Store: st})
	b.srv.Restore(loaded)
	t.Cleanup(func() { b.stop(); st.Close() })
	return b, st
}

// crashCopy copies the state directory as it is now: what a kill -9 at
// this moment would leave (records are written before they are promised).
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "state.log"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dst, "state.log"), b, 0o600)
	return dst
}

// A persistent session's subscriptions and its queued QoS 1 and QoS 2
// messages survive a crash right after the publisher's acks, in every
// sync mode; the subscriber gets them once, in order.
func TestStateQueuedSurviveCrash(t *testing.T) {
	for _, mode := range []store.Sync{store.SyncAlways, store.SyncBatch, store.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			b, _ := stateBroker(t, dir, mode)
			sub := pahoClient(t, b.addr, "actuator", false, nil)
			waitTok(t, sub.Subscribe("cmd/#", 2, func(mqtt.Client, mqtt.Message) {}), "subscribe")
			sub.Disconnect(50)
			pub := pahoClient(t, b.addr, "pub", true, nil)
			for i := range 10 {
				waitTok(t, pub.Publish("cmd/valve", byte(1+i%2), false, fmt.Sprint("open-", i)), "publish")
			}
			waitTok(t, pub.Publish("cfg/mode", 1, true, "eco"), "retained")
			crashed := crashCopy(t, dir) // every ack above has been received

			b2, _ := stateBroker(t, crashed, mode)
			var got collector
			pahoClient(t, b2.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			eventually(t, 10*time.Second, "10 queued messages", func() bool { return got.len() >= 10 })
			for i, p := range got.payloads() {
				if p != fmt.Sprint("open-", i) {
					t.Fatalf("after restart got %q", got.payloads())
				}
			}
			// The subscription itself survived: a new message arrives too.
			pub2 := pahoClient(t, b2.addr, "pub", true, nil)
			waitTok(t, pub2.Publish("cmd/valve", 1, false, "after"), "publish")
			eventually(t, 10*time.Second, "live message", func() bool { return got.len() == 11 })
			if st := b2.srv.Stats(); st.Retained != 1 {
				t.Fatalf("retained after crash = %d", st.Retained)
			}
		})
	}
}

// Write amplification of the state store: bytes written to the disk per
// payload byte queued for a persistent subscriber that is online (each
// message is queued, sent, acknowledged) and one that was offline.
func TestStateWriteAmplification(t *testing.T) {
	const size = 200
	payload := strings.Repeat("x", size)
	for _, online := range []bool{true, false} {
		n := 2000
		if !online {
			n = 900 // below max_queued_messages (1000): nothing dropped
		}
		t.Run(fmt.Sprint("online=", online), func(t *testing.T) {
			dir := t.TempDir()
			b, st := stateBroker(t, dir, store.SyncBatch)
			var got collector
			sub := pahoClient(t, b.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			waitTok(t, sub.Subscribe("cmd/#", 1, got.handle), "subscribe")
			if !online {
				sub.Disconnect(50)
			}
			pub := pahoClient(t, b.addr, "pub", true, nil)
			toks := make([]mqtt.Token, 0, n)
			for range n {
				toks = append(toks, pub.Publish("cmd/valve", 1, false, payload))
			}
			for _, tok := range toks {
				waitTok(t, tok, "publish")
			}
			if !online {
				pahoClient(t, b.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			}
			eventually(t, 20*time.Second, "all delivered", func() bool { return got.len() >= n })
			eventually(t, 10*time.Second, "queue empty", func() bool { return b.srv.Stats().Inflight == 0 })
			b.stop()
			st.Close()
			s := st.Stats()
			amp := float64(s.BytesWritten) / float64(n*size)
			t.Logf("online=%v: %d QoS 1 messages of %d B: %d bytes written (%.2f x payload), %d records, %d fsyncs (%.3f per message), %d compactions, log %d B",
				online, n, size, s.BytesWritten, amp, s.Records, s.Fsyncs, float64(s.Fsyncs)/float64(n), s.Compactions, s.LogBytes)
			// Bounded: each record once, plus at most 1/(ratio-1) of it again
			// in snapshots, plus the final snapshot of what is live.
			if s.BytesWritten > s.RecordBytes*4/3+s.LiveBytes+64<<10 {
				t.Fatalf("wrote %d bytes for %d bytes of records", s.BytesWritten, s.RecordBytes)
			}
		})
	}
}
