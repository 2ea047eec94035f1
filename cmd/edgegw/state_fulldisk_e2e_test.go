package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryStateRecoversFromFullDisk: when the broker's own state.log
// fills persistence.dir (a 2 MiB tmpfs) and the persistent subscriber then
// takes every queued message, the store writes the snapshot of the now
// tiny live state into the room of state.reserve, the rename frees the
// dead records, and new QoS 1 messages are kept and acknowledged again;
// after a clean restart none of the delivered messages comes back
// (docs/behaviour.md, "A full disk"). Before: the snapshot was written
// beside the full log and never fitted, every later QoS 1 publish to the
// session was refused for as long as edgegw ran and after a restart, and
// the delivered messages came back after a restart (found by a state
// probe, TestProbeStateFullOfDeadRecordsRecovers).
func TestBinaryStateRecoversFromFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a tmpfs")
	}
	bin := buildEdgegw(t)
	e := newPersistEnv(t, bin, "batch")
	if err := syscall.Mount("tmpfs", e.dir, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(e.dir, 0) })
	e.start()

	connect := func(id string, clean bool, h mqtt.MessageHandler) mqtt.Client {
		t.Helper()
		o := mqtt.NewClientOptions().AddBroker("tcp://" + e.addr).SetClientID(id).SetCleanSession(clean).
			SetAutoReconnect(false).SetOrderMatters(false).SetDefaultPublishHandler(h)
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		return c
	}
	var got atomic.Int64
	sub := connect("sub", false, func(mqtt.Client, mqtt.Message) { got.Add(1) })
	if tok := sub.Subscribe("fd/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)

	// Fill the 2 MiB with queued 4 KB messages until one is refused.
	pub := connect("pub", true, nil)
	payload := strings.Repeat("x", 4000)
	acked := 0
	for ; acked < 1000; acked++ {
		tok := pub.Publish(fmt.Sprintf("fd/%d", acked), 1, false, payload)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			break
		}
	}
	pub.Disconnect(100)
	if acked == 0 || acked == 1000 {
		t.Fatalf("%d acknowledged: the disk did not fill as planned", acked)
	}

	// The subscriber takes everything: the live state is now tiny.
	sub = connect("sub", false, func(mqtt.Client, mqtt.Message) { got.Add(1) })
	testutil.Eventually(t, 20*time.Second, "the subscriber got every acknowledged message", func() bool {
		return got.Load() >= int64(acked)
	})

	// A new message for the session must be kept and acknowledged again.
	pub = connect("pub", true, nil)
	defer pub.Disconnect(100)
	tok := pub.Publish("fd/after", 1, false, "small")
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("after the subscriber drained all %d messages (live state %s bytes, log %s bytes on a 2 MiB disk), a new QoS 1 message is still not acknowledged: %v",
			acked, e.metric("edgegw_state_live_bytes"), e.metric("edgegw_state_log_bytes"), tok.Error())
	}
	t.Logf("2 MiB tmpfs: %d messages of 4000 B acknowledged, then refused; after the drain and one new message: live %s B, log %s B",
		acked, e.metric("edgegw_state_live_bytes"), e.metric("edgegw_state_log_bytes"))
	testutil.Eventually(t, 10*time.Second, "the subscriber got the new message", func() bool {
		return got.Load() >= int64(acked)+1
	})
	sub.Disconnect(100)
	pub.Disconnect(100)

	// A clean restart brings back nothing the subscriber already took:
	// the session's queue is sent at connect, before a marker published
	// after it.
	e.stop(syscall.SIGTERM)
	e.start()
	var again, marker atomic.Int64
	sub = connect("sub", false, func(_ mqtt.Client, m mqtt.Message) {
		if m.Topic() == "fd/marker" {
			marker.Add(1)
		} else {
			again.Add(1)
		}
	})
	defer sub.Disconnect(100)
	pub = connect("pub", true, nil)
	if tok := pub.Publish("fd/marker", 1, false, "m"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish after the restart: %v", tok.Error())
	}
	testutil.Eventually(t, 10*time.Second, "the marker after the restart", func() bool { return marker.Load() == 1 })
	if n := again.Load(); n != 0 {
		t.Fatalf("after a clean restart %d already delivered messages came back", n)
	}
	if fi, err := os.Stat(filepath.Join(e.dir, "state", "state.reserve")); err != nil || fi.Size() != 64<<10 {
		t.Fatalf("state.reserve after the recovery: %v %v", fi, err)
	}
}
