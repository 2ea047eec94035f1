package main

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestProbeStateFullOfDeadRecordsRecovers: when the broker's own
// state.log fills persistence.dir, and the persistent subscriber then
// takes every queued message, the live state is a few hundred bytes: the
// store must get its disk back (compact) and keep and acknowledge new
// messages again (docs/behaviour.md, "SD-card wear": the log is rewritten
// as a snapshot of the live state; gateway/store doc: "the model keeps the
// change and the next flush writes a snapshot"). Found by a state probe:
// the snapshot is written to state.log.tmp beside the full log, which can
// never fit, so every later QoS 1 publish to the session is refused (the
// 3.1.1 publisher is disconnected without a PUBACK) for as long as edgegw
// runs, and after a restart too.
func TestProbeStateFullOfDeadRecordsRecovers(t *testing.T) {
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
	sub.Disconnect(100)
}
