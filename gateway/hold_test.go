//go:build linux

package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/internal/testutil"
)

// mountTmpfs mounts a tmpfs of size (e.g. "2m") on a new directory and
// unmounts it at cleanup. A full disk is only real on a real file system;
// mounting needs root (CI runs as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// publishAll publishes payloads at QoS 1 from an MQTT 5 client, 16 in
// flight, and returns each one's PUBACK reason code.
func publishAll(t *testing.T, rc *rawClient, topic string, retain bool, payloads []string) []packet.ReasonCode {
	t.Helper()
	codes := make([]packet.ReasonCode, len(payloads))
	next, inflight := 0, 0
	for acked := 0; acked < len(payloads); acked++ {
		for inflight < 16 && next < len(payloads) {
			rc.send(&packet.Publish{QoS: 1, PacketID: uint16(next + 1), Topic: topic, Retain: retain, Payload: []byte(payloads[next])})
			next++
			inflight++
		}
		a := expect[*packet.Puback](t, rc, 20*time.Second)
		codes[a.PacketID-1] = a.ReasonCode
		inflight--
	}
	return codes
}

// counter counts the payloads a subscriber received.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[p]++
}

func (c *counter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps(c.n)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// countingSubscriber connects a persistent MQTT 5 session that acknowledges
// and counts every message it gets.
func countingSubscriber(t *testing.T, addr, id string, clean bool, got *counter) *rawClient {
	t.Helper()
	rc := rawDial(t, addr, packet.V5)
	rc.hook = func(rc *rawClient, p packet.Packet) bool {
		if pub, ok := p.(*packet.Publish); ok {
			got.add(string(pub.Payload))
		}
		autoAck(rc, p)
		_, pub := p.(*packet.Publish)
		return pub
	}
	cp := &packet.Connect{ClientID: id, CleanStart: clean, KeepAlive: 60}
	withExpiry(3600)(cp)
	rc.connect(cp)
	return rc
}

// With persistence.dir on a full disk, a message the state store could not
// keep (PUBACK 0x83) reaches no one: not the online persistent session, not
// the offline one after a restart, and not as a retained message. The
// publisher sends the refused ones again once there is room (as it should
// after 0x83): every subscriber then has every message exactly once.
func TestRefusedMessageIsNotDelivered(t *testing.T) {
	root := mountTmpfs(t, "2m")
	dir := filepath.Join(root, "state")
	// Room for every message in the offline session's queue.
	opts := gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 4000}
	b, st := stateBrokerOpts(t, dir, store.SyncBatch, 2*time.Millisecond, opts)

	off, _ := rawConnect(t, b.addr, packet.V5, "offline", true, withExpiry(3600))
	off.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "t/#", QoS: 1})
	off.disconnect()
	var online counter
	on := countingSubscriber(t, b.addr, "online", true, &online)
	on.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "t/#", QoS: 1}}})
	expect[*packet.Suback](t, on, 10*time.Second)

	filler := testutil.FillDisk(t, root)
	const n = 1500
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf("m%04d-%0100d", i, i)
	}
	pub, _ := rawConnect(t, b.addr, packet.V5, "pub", true, nil)
	codes := publishAll(t, pub, "t/x", true, payloads)
	var refused []string
	lastKept := ""
	for i, c := range codes {
		switch c {
		case packet.Success:
			lastKept = payloads[i]
		case packet.ImplementationSpecificError:
			refused = append(refused, payloads[i])
		default:
			t.Fatalf("message %d: reason %v", i, c)
		}
	}
	if len(refused) == 0 {
		t.Fatal("the full disk refused nothing: the test shows nothing")
	}
	// The retained message is the last one kept, not a refused one.
	late, _ := rawConnect(t, b.addr, packet.V5, "late", true, nil)
	late.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "t/x", QoS: 1})
	if r := late.nextPublish(10 * time.Second); string(r.Payload) != lastKept || !r.Retain {
		t.Fatalf("retained %.5s (retain %v), want the last one kept, %.5s", r.Payload, r.Retain, lastKept)
	}
	late.close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// What the publisher does after 0x83: send it again, until it is kept
	// (the store takes up to its backoff to try the disk again).
	deadline := time.Now().Add(30 * time.Second)
	for left := refused; len(left) > 0; {
		var again []string
		for i, c := range publishAll(t, pub, "t/x", false, left) {
			switch c {
			case packet.Success:
			case packet.ImplementationSpecificError:
				again = append(again, left[i])
			default:
				t.Fatalf("resent %.5s: reason %v", left[i], c)
			}
		}
		if left = again; len(left) > 0 && time.Now().After(deadline) {
			t.Fatalf("%d still refused 30 s after space was freed", len(left))
		}
	}
	check := func(who string, got map[string]int) {
		t.Helper()
		dups, missing := 0, 0
		for _, p := range payloads {
			switch got[p] {
			case 0:
				missing++
			case 1:
			default:
				dups++
			}
		}
		if dups > 0 || missing > 0 || len(got) != n {
			t.Fatalf("%s: %d duplicates, %d missing of %d (%d refused and sent again)", who, dups, missing, n, len(refused))
		}
	}
	testutil.Eventually(t, 20*time.Second, "the online session has every message", func() bool { return len(online.get()) >= n })
	// A marker behind everything: what is still on its way has arrived.
	publishAll(t, pub, "t/marker", false, []string{"marker"})
	testutil.Eventually(t, 10*time.Second, "the marker", func() bool { return online.get()["marker"] == 1 })
	got := online.get()
	delete(got, "marker")
	check("online session", got)
	t.Logf("%d messages on a full disk: %d refused (0x83), %d acknowledged; after the resend every session has each once",
		n, len(refused), n-len(refused))

	on.close()
	pub.close()
	b.stop()
	st.Close()
	b2, _ := stateBrokerOpts(t, dir, store.SyncBatch, 2*time.Millisecond, opts)
	var restored counter
	countingSubscriber(t, b2.addr, "offline", false, &restored)
	// The marker is its last message: once it is in, everything is.
	testutil.Eventually(t, 20*time.Second, "the offline session's marker after a restart", func() bool { return restored.get()["marker"] == 1 })
	got = restored.get()
	delete(got, "marker")
	check("offline session after a restart", got)
}
