package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of the broker's state in persistence.dir through the binary:
// what survives a stop or a crash, what a clean session leaves, damage
// and a full disk.

// persistentGateway is the binary with its state in a directory
// (returned) kept with the sync mode, driven by mosquitto clients.
func persistentGateway(t *testing.T, sync string) (*harness, string) {
	g := newHarness(t)
	return g, g.Persist(sync, "20ms")
}

// stateBytes is everything under dir/state, concatenated.
func stateBytes(dir string) []byte {
	var all []byte
	filepath.Walk(filepath.Join(dir, "state"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			all = append(all, b...)
		}
		return nil
	})
	return all
}

// retainedNow subscribes with a real paho client to filter and returns
// the retained messages it gets: everything before a marker it publishes
// after its SUBACK (retained messages are queued before SUBACK returns).
func retainedNow(t *testing.T, g *harness, filter string) map[string]string {
	t.Helper()
	got := make(chan [2]string, 100)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + g.Addr).SetClientID("retained-check").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	mustToken(t, "subscribe", c.SubscribeMultiple(map[string]byte{filter: 1, "marker/end": 1}, func(_ mqtt.Client, m mqtt.Message) {
		got <- [2]string{m.Topic(), string(m.Payload())}
	}))
	mustToken(t, "publish marker", c.Publish("marker/end", 1, false, "end"))
	out := map[string]string{}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-got:
			if m[0] == "marker/end" {
				return out
			}
			out[m[0]] = m[1]
		case <-deadline:
			t.Fatalf("marker never arrived; got %v", out)
		}
	}
}

// TestBinaryStateSurvivesRestart: with persistence.dir, a persistent
// subscriber's 10 queued QoS 1 messages, a retained message and a cleared
// retained message survive SIGTERM and kill -9 in every sync mode; a clean
// session leaves nothing on disk.
func TestBinaryStateSurvivesRestart(t *testing.T) {
	for _, c := range []struct {
		sync string
		sig  syscall.Signal
	}{
		{"batch", syscall.SIGTERM}, {"batch", syscall.SIGKILL},
		{"always", syscall.SIGKILL}, {"none", syscall.SIGKILL},
	} {
		t.Run(c.sync+"/"+c.sig.String(), func(t *testing.T) {
			g, dir := persistentGateway(t, c.sync)
			g.Start()
			// A persistent subscriber (an actuator) registers and goes offline.
			g.Mosq("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-E")
			// A clean session that must leave nothing on disk.
			g.Mosq("mosquitto_sub", "-i", "clean-client", "-q", "1", "-t", "secret/#", "-E")
			for i := range 10 {
				g.Mosq("mosquitto_pub", "-q", "1", "-t", "cmd/valve", "-m", fmt.Sprintf("open-%d", i))
			}
			g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "keep/r", "-m", "kept")
			g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "gone/r", "-m", "soon-cleared")
			g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "gone/r", "-n")
			g.Mosq("mosquitto_pub", "-q", "1", "-t", "secret/x", "-m", "secret-payload")
			if v := g.Metric("edgegw_state_bytes_written_total"); v <= 0 {
				t.Errorf("edgegw_state_bytes_written_total = %v", v)
			}
			// Every publish above was acknowledged: now stop (or crash).
			if c.sig == syscall.SIGTERM {
				g.Stop()
			} else {
				g.Kill()
			}
			for _, w := range []string{"clean-client", "secret"} {
				if bytes.Contains(stateBytes(dir), []byte(w)) {
					t.Errorf("%q found on disk: a clean session must leave nothing", w)
				}
			}

			g.Start()
			out := g.Mosq("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-v", "-C", "10", "-W", "20")
			var want []string
			for i := range 10 {
				want = append(want, fmt.Sprintf("cmd/valve open-%d", i))
			}
			if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("persistent subscriber got after restart:\n%s\nwant the 10 queued messages in order", out)
			}
			if got := retainedNow(t, g, "+/r"); len(got) != 1 || got["keep/r"] != "kept" {
				t.Fatalf("retained after restart = %v, want only keep/r=kept (gone/r stays cleared)", got)
			}
		})
	}
}

// TestBinaryExpiredSessionLeavesNothing: a persistent session that expired
// leaves no trace in persistence.dir after a clean stop.
func TestBinaryExpiredSessionLeavesNothing(t *testing.T) {
	g, dir := persistentGateway(t, "batch")
	g.Start()
	g.Mosq("mosquitto_sub", "-V", "mqttv5", "-c", "-x", "2", "-i", "short-lived", "-q", "1", "-t", "tmp/short-lived-topic", "-E")
	g.Mosq("mosquitto_pub", "-q", "1", "-t", "tmp/short-lived-topic", "-m", "short-lived-payload")
	// Acknowledged, so on disk while the session lives (this test can fail).
	if !bytes.Contains(stateBytes(dir), []byte("short-lived-payload")) && g.Metric("edgegw_sessions_expired_total") == 0 {
		t.Fatal("queued message of a live persistent session not on disk")
	}
	testutil.Eventually(t, 10*time.Second, "session expiry", func() bool { return g.Metric("edgegw_sessions_expired_total") == 1 })
	g.Stop()
	if b := stateBytes(dir); bytes.Contains(b, []byte("short-lived")) || len(b) == 0 {
		t.Fatalf("expired session still on disk (%d bytes)", len(b))
	}
}

// TestBinaryDamagedStateStillStarts: a damaged state file never keeps the
// broker from starting: readable records are kept, the file is moved
// aside and the damage is logged at ERROR; a state directory that cannot
// be used at all leaves the broker running with its state in memory.
func TestBinaryDamagedStateStillStarts(t *testing.T) {
	t.Run("flipped byte", func(t *testing.T) {
		g, dir := persistentGateway(t, "batch")
		g.Start()
		g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "first")
		g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "keep/b", "-m", "second")
		g.Kill()
		path := filepath.Join(dir, "state", "state.log")
		b, err := os.ReadFile(path)
		i := bytes.Index(b, []byte("first"))
		if err != nil || i < 0 {
			t.Fatalf("state file: %v, %d bytes", err, len(b))
		}
		b[i] ^= 0xff // damage the keep/a record only
		os.WriteFile(path, b, 0o600)
		g.Start()
		if got := retainedNow(t, g, "keep/+"); len(got) != 1 || got["keep/b"] != "second" {
			t.Fatalf("retained after damage = %v, want keep/b only (the damaged record lost)", got)
		}
		if !strings.Contains(g.Logs(), "level=ERROR msg=\"state file damaged") {
			t.Fatal("damage not logged at ERROR")
		}
		if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) != 1 {
			t.Fatalf("damaged file not kept aside: %v", m)
		}
	})
	t.Run("unusable dir", func(t *testing.T) {
		g, dir := persistentGateway(t, "batch")
		os.WriteFile(filepath.Join(dir, "state"), []byte("a file where the state dir should be"), 0o600)
		g.Start()
		g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "in memory")
		if got := retainedNow(t, g, "keep/+"); got["keep/a"] != "in memory" {
			t.Fatalf("broker without its state dir: retained %v", got)
		}
		if !strings.Contains(g.Logs(), "level=ERROR msg=\"broker state cannot be kept on disk") {
			t.Fatal("unusable state dir not logged at ERROR")
		}
	})
}

// TestBinaryNoPersistenceDir: without persistence.dir nothing survives a
// restart, and nothing is written where the binary runs.
func TestBinaryNoPersistenceDir(t *testing.T) {
	g := newHarness(t)
	cwd := t.TempDir()
	g.Prepare = func(cmd *exec.Cmd, _ *os.File) { cmd.Dir = cwd }
	g.Start()
	g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "x")
	if got := retainedNow(t, g, "keep/+"); len(got) != 1 {
		t.Fatalf("retained before restart: %v", got)
	}
	g.Restart()
	if got := retainedNow(t, g, "keep/+"); len(got) != 0 {
		t.Fatalf("retained after a restart without persistence.dir: %v", got)
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Fatalf("files written without persistence.dir: %v", entries)
	}
}

// TestBinaryOfflineSessionQueuesNoQoS0 holds docs/behaviour.md's "QoS 0
// messages are not queued for disconnected clients", with mosquitto
// clients against the binary: a persistent session that is offline gets,
// when it comes back, the QoS 1 messages published meanwhile and none of
// the messages that would have reached it at QoS 0 (a QoS 0 publish on
// its QoS 1 subscription, a QoS 1 publish on its QoS 0 subscription).
func TestBinaryOfflineSessionQueuesNoQoS0(t *testing.T) {
	g, _ := persistentGateway(t, "batch")
	g.Start()
	// Subscribe, then go offline (-E: exit once subscribed).
	g.Mosq("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "1", "-t", "q1/#", "-E")
	g.Mosq("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "0", "-t", "q0/#", "-E")

	g.Mosq("mosquitto_pub", "-q", "0", "-t", "q1/a", "-m", "qos0-publish")
	g.Mosq("mosquitto_pub", "-q", "1", "-t", "q1/a", "-m", "kept-1")
	g.Mosq("mosquitto_pub", "-q", "1", "-t", "q0/a", "-m", "qos0-subscription")
	g.Mosq("mosquitto_pub", "-q", "2", "-t", "q1/a", "-m", "kept-2")

	// A queue is sent in order: the two kept messages are its whole content
	// exactly when nothing else was queued before or between them.
	out := g.Mosq("mosquitto_sub", "-c", "-i", "offline-sub", "-q", "1", "-t", "q1/#", "-v", "-C", "2", "-W", "20")
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != "q1/a kept-1|q1/a kept-2" {
		t.Fatalf("the session came back to:\n%s\nwant only the QoS 1 and 2 messages (q1/a kept-1, q1/a kept-2)", out)
	}
}

// TestBinaryStateHeaderDamageLosesOnlyTheDamage: the 8-byte header of
// state.log holds no record, so damage there must cost no retained
// message or session (docs/behaviour.md, "Damage": "A damaged record (a
// flipped byte, a zeroed flash page) is skipped ... only the damaged
// records are lost"). One flipped magic byte, or a zeroed first flash
// page, once made the store take the whole file as "not a state file",
// move it aside and start empty, though every record in it was intact;
// the records behind the header now decide (gateway/store loadRecords).
func TestBinaryStateHeaderDamageLosesOnlyTheDamage(t *testing.T) {
	const n = 60 // with 2 KiB payloads the records reach past the first 4 KiB page
	payload := strings.Repeat("p", 2048)
	for _, c := range []struct {
		name   string
		damage func(b []byte) (lostAtMost int)
	}{
		{"magic byte flipped", func(b []byte) int { b[0] ^= 0xff; return 0 }},
		// A zeroed 4 KiB flash page costs the records it touches: with
		// ~2.1 KiB per record, at most 2 of them (plus the header).
		{"first page zeroed", func(b []byte) int { clear(b[:4096]); return 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, dir := persistentGateway(t, "batch")
			g.Start()
			for i := range n {
				g.Mosq("mosquitto_pub", "-q", "1", "-r", "-t", fmt.Sprintf("keep/%d", i), "-m", payload)
			}
			g.Stop()
			path := filepath.Join(dir, "state", "state.log")
			b, err := os.ReadFile(path)
			if err != nil || len(b) < 3*4096 {
				t.Fatalf("state file: %v, %d bytes", err, len(b))
			}
			lost := c.damage(b)
			os.WriteFile(path, b, 0o600)
			g.Start()
			if got := retainedNow(t, g, "keep/+"); len(got) < n-lost {
				t.Fatalf("retained after damage to the file's header: %d of %d, want at least %d (the header holds no record)",
					len(got), n, n-lost)
			}
		})
	}
}

// TestBinaryStateRecoversFromFullDisk: when the broker's own state.log
// fills persistence.dir (a 2 MiB tmpfs) and the persistent subscriber then
// takes every queued message, the store writes the snapshot of the now
// tiny live state into the room of state.reserve, the rename frees the
// dead records, and new QoS 1 messages are kept and acknowledged again;
// after a clean restart none of the delivered messages comes back
// (docs/behaviour.md, "A full disk"). The snapshot was once written beside
// the full log and never fitted: every later QoS 1 publish to the session
// was refused, and the delivered messages came back after a restart.
func TestBinaryStateRecoversFromFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a tmpfs")
	}
	g, dir := persistentGateway(t, "batch")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	g.Start()

	connect := func(id string, clean bool, h mqtt.MessageHandler) mqtt.Client {
		t.Helper()
		o := mqtt.NewClientOptions().AddBroker("tcp://" + g.Addr).SetClientID(id).SetCleanSession(clean).
			SetAutoReconnect(false).SetOrderMatters(false).SetDefaultPublishHandler(h)
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		return c
	}
	var got atomic.Int64
	sub := connect("sub", false, func(mqtt.Client, mqtt.Message) { got.Add(1) })
	mustToken(t, "subscribe", sub.Subscribe("fd/#", 1, nil))
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
		t.Fatalf("after the subscriber drained all %d messages (live state %v bytes, log %v bytes on a 2 MiB disk), a new QoS 1 message is still not acknowledged: %v",
			acked, g.Metric("edgegw_state_live_bytes"), g.Metric("edgegw_state_log_bytes"), tok.Error())
	}
	t.Logf("2 MiB tmpfs: %d messages of 4000 B acknowledged, then refused; after the drain and one new message: live %v B, log %v B",
		acked, g.Metric("edgegw_state_live_bytes"), g.Metric("edgegw_state_log_bytes"))
	testutil.Eventually(t, 10*time.Second, "the subscriber got the new message", func() bool {
		return got.Load() >= int64(acked)+1
	})
	sub.Disconnect(100)
	pub.Disconnect(100)

	// A clean restart brings back nothing the subscriber already took:
	// the session's queue is sent at connect, before a marker published
	// after it.
	g.Restart()
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
	mustToken(t, "publish after the restart", pub.Publish("fd/marker", 1, false, "m"))
	testutil.Eventually(t, 10*time.Second, "the marker after the restart", func() bool { return marker.Load() == 1 })
	if n := again.Load(); n != 0 {
		t.Fatalf("after a clean restart %d already delivered messages came back", n)
	}
	if fi, err := os.Stat(filepath.Join(dir, "state", "state.reserve")); err != nil || fi.Size() != 64<<10 {
		t.Fatalf("state.reserve after the recovery: %v %v", fi, err)
	}
}
