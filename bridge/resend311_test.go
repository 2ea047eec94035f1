package bridge_test

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReconnectResendsUnackedQoS1 is the session promise over MQTT 3.1.1
// now that the bridge writes QoS 0/1 publishes itself (direct.go): the
// upstream withholds the answers of some QoS 1 and QoS 2 messages of a
// stream that mixes both, then the connection drops. With a resumed
// session (clean_session false) the next connection starts with the
// unacknowledged flows, in the order of their records, QoS 1 and 2
// mixed: each QoS 1 and unreceived QoS 2 PUBLISH under the packet id it
// first had with DUP set (3.1.1) [MQTT-4.4.0-1] [MQTT-3.3.1-1], the
// PUBREL of a received QoS 2 one; only then anything new, even what was
// spooled during the outage and waits for the sender the moment the
// connection is up. With a clean
// session they are sent again as new messages (DUP clear). Either way
// nothing is lost and the first copies keep the local order.
func TestReconnectResendsUnackedQoS1(t *testing.T) {
	for _, clean := range []bool{false, true} {
		t.Run(fmt.Sprintf("clean_session=%v", clean), func(t *testing.T) { testReconnectResends(t, clean) })
	}
}

func testReconnectResends(t *testing.T, clean bool) {
	const n, more = 10, 6 // m0..m9 before the drop, m10..m15 during the outage, m16 after it
	withheld := map[string]bridge.Withhold{
		"m2": bridge.NoPuback, "m3": bridge.NoPubrec, "m4": bridge.NoPuback,
		"m5": bridge.NoPubcomp, "m6": bridge.NoPuback,
	}
	qosOf := func(i int) byte { return byte(1 + i%2) }     // even QoS 1, odd QoS 2
	up := bridge.StartRawUpstream(t, maps.Clone(withheld)) // it clears its copy (AnswerEverything)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", up.URL())
	cfg.CleanSession = clean
	cfg.Topics = []bridge.Rule{
		{Pattern: "one/#", Direction: bridge.Out, QoS: 1},
		{Pattern: "two/#", Direction: bridge.Out, QoS: 2},
	}
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	pub := func(i int) {
		topic := "one/t"
		if qosOf(i) == 2 {
			topic = "two/t"
		}
		publish(t, lc, topic, qosOf(i), "m"+strconv.Itoa(i))
	}
	for i := range n {
		pub(i)
	}
	testutil.Eventually(t, 10*time.Second, "every answered message acked", func() bool {
		_, _, _, distinct := up.Stats()
		return distinct == n && b.Stats().Acked == uint64(n-len(withheld))
	})
	first := make(map[string]uint16) // payload -> id of its first PUBLISH
	for _, p := range up.Wire() {
		if _, ok := first[p.Payload]; !ok && p.Type == "PUBLISH" {
			first[p.Payload] = p.ID
			if p.Dup {
				t.Errorf("first PUBLISH of %s has DUP set", p.Payload)
			}
		}
	}

	// The upstream goes down; m10..m15 are spooled meanwhile, so the
	// sender has them to write the moment the next connection is up.
	conns := b.Stats().Connects
	up.AnswerEverything()
	up.SetDown(true)
	up.Drop()
	b.waitState(t, bridge.Disconnected)
	for i := n; i < n+more; i++ {
		pub(i)
	}
	up.SetDown(false)
	testutil.Eventually(t, 10*time.Second, "the reconnect", func() bool {
		st := b.Stats()
		return st.Connects > conns && st.State == bridge.Connected
	})
	pub(n + more)
	testutil.Eventually(t, 10*time.Second, "everything acked", func() bool {
		st := b.Stats()
		return st.Acked == n+more+1 && st.SpoolMessages == 0
	})

	var second []bridge.RawPacket
	var order []string // first copies of every message, both connections
	seen := make(map[string]bool)
	for _, p := range up.Wire() {
		if p.Conn == 2 {
			second = append(second, p)
		}
		if p.Type == "PUBLISH" && !seen[p.Payload] {
			seen[p.Payload] = true
			order = append(order, p.Payload)
		}
	}
	for i, p := range order {
		if want := "m" + strconv.Itoa(i); p != want {
			t.Fatalf("first copies out of order: %v", order)
		}
	}
	if len(order) != n+more+1 {
		t.Fatalf("upstream got %d distinct messages, want %d: %v", len(order), n+more+1, order)
	}
	var got []string
	for _, p := range second {
		got = append(got, fmt.Sprintf("%s %s id=%d dup=%v", p.Type, p.Payload, p.ID, p.Dup))
	}
	t.Logf("RESEND clean_session=%v, connection 2 read: %s", clean, strings.Join(got, "; "))

	var want []string
	if clean {
		// The broker forgot the session: the unanswered records go again
		// as new messages, oldest first, then the new ones.
		for _, i := range []int{2, 3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16} {
			want = append(want, "PUBLISH m"+strconv.Itoa(i)+" dup=false")
		}
	} else {
		// The cut flows first, in record order, under their first ids.
		for i := 2; i <= 6; i++ {
			m := "m" + strconv.Itoa(i)
			if withheld[m] == bridge.NoPubcomp {
				want = append(want, fmt.Sprintf("PUBREL %s id=%d", m, first[m]))
				continue
			}
			want = append(want, fmt.Sprintf("PUBLISH %s id=%d dup=true", m, first[m]))
		}
		for i := n; i <= n+more; i++ {
			want = append(want, "PUBLISH m"+strconv.Itoa(i)+" dup=false")
		}
	}
	var have []string
	sent := make(map[string]bool) // PUBLISHed on connection 2
	for _, p := range second {
		switch {
		case p.Type == "PUBREL" && sent[p.Payload]:
			// the flow of a QoS 2 PUBLISH sent on this connection
		case p.Type == "PUBREL":
			have = append(have, fmt.Sprintf("PUBREL %s id=%d", p.Payload, p.ID))
		case p.Dup:
			have = append(have, fmt.Sprintf("PUBLISH %s id=%d dup=true", p.Payload, p.ID))
		default:
			have = append(have, fmt.Sprintf("PUBLISH %s dup=false", p.Payload))
		}
		if p.Type == "PUBLISH" {
			sent[p.Payload] = true
		}
	}
	if strings.Join(have, "; ") != strings.Join(want, "; ") {
		t.Fatalf("connection 2 read\n  %s\nwant\n  %s", strings.Join(have, "; "), strings.Join(want, "; "))
	}
	if l, _ := b.Ledger(); !l.AddsUp {
		t.Errorf("ledger %+v", l)
	}
}
