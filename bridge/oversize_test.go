package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// timedLog is a slog.Handler that keeps each record's time, level,
// message and attributes (the bridge's own With attributes included).
type timedLog struct {
	mu    *sync.Mutex
	recs  *[]timedRec
	attrs []slog.Attr
}

type timedRec struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

func newTimedLog() *timedLog { return &timedLog{mu: new(sync.Mutex), recs: new([]timedRec)} }

func (h *timedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *timedLog) WithGroup(string) slog.Handler            { return h }
func (h *timedLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &timedLog{mu: h.mu, recs: h.recs, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *timedLog) Handle(_ context.Context, r slog.Record) error {
	rec := timedRec{at: r.Time, level: r.Level, msg: r.Message, attrs: make(map[string]string)}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

// find returns the records whose message starts with prefix.
func (h *timedLog) find(prefix string) []timedRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []timedRec
	for _, r := range *h.recs {
		if strings.HasPrefix(r.msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// runTimedBridge runs a bridge whose own lines go to the returned log.
func runTimedBridge(t *testing.T, cfg bridge.Config, gw bridge.Gateway) (*running, *timedLog) {
	t.Helper()
	h := newTimedLog()
	b, err := bridge.New(cfg, gw, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	r := &running{Bridge: b}
	r.start(t)
	return r, h
}

// oversizePayload returns a payload that makes a QoS 1 PUBLISH to topic
// exactly packet bytes long, over MQTT 3.1.1 or 5 (one byte more for the
// properties' length: the bridge sends none). MQTT 5 1.5.5 / 3.1.1 2.2.3:
// the fixed header is one byte and the remaining length in 1 to 4.
func oversizePayload(topic string, packet int, v5 bool) string {
	for p := 0; ; p++ {
		rl := 2 + len(topic) + 2 + p
		if v5 {
			rl++
		}
		n := 2
		for v := rl; v >= 128; v >>= 7 {
			n++
		}
		if n+rl == packet {
			return strings.Repeat("x", p)
		}
		if n+rl > packet {
			panic(fmt.Sprintf("no payload makes a %d-byte packet", packet))
		}
	}
}

// TestMaxPacketSizeDropsOversize: with max_packet_size, a message whose
// PUBLISH is larger than the limit is dropped before it is sent, counted
// as 0x95 packet too large and as refused in the ledger, and everything
// around it is delivered on the one connection. Over MQTT 3.1.1 (the
// broker cannot say its limit) and over MQTT 5 with the broker's announced
// limit larger or smaller than the configured one: the smaller applies. A
// message of exactly the limit goes (the size compared is the packet's
// exact size: the window's estimate is 2-3 bytes over), one byte more
// does not (mosquitto 2.0.11 takes that one from a client of its own,
// checked over 3.1.1: only the bridge can have held it back). The drops
// are logged as MQTT 5 refusals are: one WARN line per burst.
func TestMaxPacketSizeDropsOversize(t *testing.T) {
	const topic = "site-a/sensors/t" // upstream
	for _, tc := range []struct {
		name          string
		proto         string
		broker, limit int
	}{
		{"3.1.1", bridge.Protocol311, 200, 200},
		{"5 config smaller", bridge.Protocol5, 1000, 200},
		{"5 broker smaller", bridge.Protocol5, 200, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startMosquittoConf(t, fmt.Sprintf("max_packet_size %d\n", tc.broker))
			cloud := subscribe(t, up.addr(), "cloud-reader", "site-a/#", 1)
			gw := startGateway(t)
			cfg := testConfig(t, "b1", up.url())
			cfg.Protocol, cfg.MaxPacketSize = tc.proto, tc.limit
			b, h := runTimedBridge(t, cfg, gw.srv)
			b.waitState(t, bridge.Connected)
			v5 := tc.proto == bridge.Protocol5
			fits, over := oversizePayload(topic, 200, v5), oversizePayload(topic, 201, v5)
			big := strings.Repeat("y", 400)
			lc := client(t, gw.addr, "local-pub")
			for _, p := range []string{"before", fits, over, big, "after"} {
				publish(t, lc, "sensors/t", 1, p)
			}
			testutil.Eventually(t, 10*time.Second, "the spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
			testutil.Eventually(t, 10*time.Second, "after upstream", func() bool { return cloud.has(topic, "after") })
			if !cloud.has(topic, "before") || !cloud.has(topic, fits) || cloud.has(topic, over) || cloud.has(topic, big) {
				t.Fatalf("upstream got before %v, the 200-byte one %v, the 201-byte one %v, the large one %v; want true, true, false, false",
					cloud.has(topic, "before"), cloud.has(topic, fits), cloud.has(topic, over), cloud.has(topic, big))
			}
			st := b.Stats()
			l, _ := b.Ledger()
			if st.UpstreamDroppedBy[0x95] != 2 || st.UpstreamDropped != 2 || l.Dropped["refused"] != 2 || !l.AddsUp {
				t.Fatalf("dropped %v (total %d), ledger refused %d (adds up %v); want 2 for 0x95 packet too large",
					st.UpstreamDroppedBy, st.UpstreamDropped, l.Dropped["refused"], l.AddsUp)
			}
			if st.Connects != 1 || st.Disconnects != 0 {
				t.Fatalf("%d connections, %d ended; want 1 and 0: nothing too large was sent", st.Connects, st.Disconnects)
			}
			if w := h.find("upstream refused messages: dropped"); len(w) != 1 || w[0].level != slog.LevelWarn ||
				w[0].attrs["reason"] != "packet too large" || w[0].attrs["bridge"] != "b1" {
				t.Fatalf("log lines for the drops: %+v; want one WARN, reason packet too large", w)
			}
			if !v5 {
				publish(t, client(t, up.addr(), "cloud-pub"), topic, 1, over)
				testutil.Eventually(t, 10*time.Second, "the 201-byte PUBLISH through mosquitto from a client", func() bool { return cloud.has(topic, over) })
			}
		})
	}
}

// TestOversizeWithoutLimitIsNamedNotDropped: over MQTT 3.1.1, without
// max_packet_size, a message larger than mosquitto's max_packet_size makes
// mosquitto close the connection every time the bridge sends it, and it
// is sent first on every connection (here re-sent from the persistent
// session, which knows no topic: the line has the one the first
// connection sent). The bridge does not drop it (it cannot tell it from a
// message a flaky link cut three times), but after three such connections
// it says so: one ERROR line with the topic and size and the key to set,
// and last_error. With an in rule the connection ends while it subscribes
// (the session's flows go first, right after the CONNACK): those attempts
// count too. Set to the broker's limit (a restart, on the same spool),
// the message is dropped as packet too large and the one behind it is
// delivered.
//
// Without in rules every connection is up before the message is sent, and
// the backoff grows: before, every CONNACK reset it, and the bridge
// reconnected every 20-40 ms (reconnect_min 20ms) for ever.
func TestOversizeWithoutLimitIsNamedNotDropped(t *testing.T) {
	const topic = "site-a/sensors/t"
	for _, tc := range []struct {
		name   string
		inRule bool
	}{{"out rules only", false}, {"with an in rule", true}} {
		t.Run(tc.name, func(t *testing.T) {
			up := startMosquittoConf(t, "max_packet_size 200\n")
			cloud := subscribe(t, up.addr(), "cloud-reader", "site-a/sensors/#", 1)
			gw := startGateway(t)
			cfg := testConfig(t, "b1", up.url())
			cfg.CleanSession = false
			cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 2*time.Second
			if !tc.inRule {
				cfg.Topics = cfg.Topics[:1] // sensors/# out
			}
			h := newTimedLog()
			defer func() {
				if t.Failed() {
					t.Log(h.dump())
				}
			}()
			lb, err := bridge.New(cfg, gw.srv, slog.New(h))
			if err != nil {
				t.Fatal(err)
			}
			b := &running{Bridge: lb}
			b.start(t)
			b.waitState(t, bridge.Connected)
			lc := client(t, gw.addr, "local-pub")
			publish(t, lc, "sensors/t", 1, "before")
			testutil.Eventually(t, 10*time.Second, "before upstream", func() bool { return cloud.has(topic, "before") })
			big := strings.Repeat("y", 400) // a 423-byte PUBLISH
			publish(t, lc, "sensors/t", 1, big)
			publish(t, lc, "sensors/t", 1, "after")

			testutil.Eventually(t, 10*time.Second, "the ERROR line", func() bool { return len(h.find("uplink keeps ending")) > 0 })
			e := h.find("uplink keeps ending")[0]
			if e.level != slog.LevelError || e.attrs["bridge"] != "b1" || e.attrs["topic"] != topic || e.attrs["size"] != "423" ||
				!strings.Contains(e.msg, "bridges[].max_packet_size") {
				t.Fatalf("line: %s %q %v", e.level, e.msg, e.attrs)
			}
			testutil.Eventually(t, 10*time.Second, "the hint in last_error", func() bool {
				le := b.Stats().LastError
				return strings.Contains(le, "423 bytes, topic "+topic) && strings.Contains(le, "set bridges[].max_packet_size")
			})

			if !tc.inRule {
				// The first connection delivered "before" (a reset), none
				// since delivered anything: the wait before the 7th is at
				// least 640/2 ms.
				testutil.Eventually(t, 15*time.Second, "7 connections", func() bool { return len(h.find("uplink connected")) >= 7 })
				conns := h.find("uplink connected")
				var gaps []time.Duration
				for i := 1; i < len(conns); i++ {
					gaps = append(gaps, conns[i].at.Sub(conns[i-1].at).Round(time.Millisecond))
				}
				t.Logf("OVERSIZE-BACKOFF gaps between connections %v", gaps)
				if gaps[5] < 320*time.Millisecond {
					t.Fatalf("gaps between connections %v: the 6th is %s, want >= 320 ms (backoff from 20 ms doubling, reset only by the first connection)", gaps, gaps[5])
				}
			} else {
				testutil.Eventually(t, 15*time.Second, "4 attempts", func() bool { return b.Stats().ConnectFailures >= 4 })
			}
			if n := len(h.find("uplink keeps ending")); n != 1 {
				t.Fatalf("%d ERROR lines; want 1", n)
			}
			st := b.Stats()
			l, _ := b.Ledger()
			if st.UpstreamDropped != 0 || l.Dropped["refused"] != 0 || st.SpoolMessages != 2 || cloud.has(topic, "after") {
				t.Fatalf("dropped %d, ledger refused %d, %d in the spool, after upstream %v: want 0, 0, 2 (kept, not delivered), false",
					st.UpstreamDropped, l.Dropped["refused"], st.SpoolMessages, cloud.has(topic, "after"))
			}

			// The remedy: the broker's limit, a restart on the same spool.
			b.stop(t)
			cfg.MaxPacketSize = 200
			b2 := runBridge(t, cfg, gw.srv)
			testutil.Eventually(t, 10*time.Second, "after upstream", func() bool { return cloud.has(topic, "after") })
			testutil.Eventually(t, 10*time.Second, "the spool empty", func() bool { return b2.Stats().SpoolMessages == 0 })
			l, _ = b2.Ledger()
			if l.Dropped["refused"] != 1 || cloud.has(topic, big) {
				t.Fatalf("ledger refused %d, large one upstream %v; want 1, false", l.Dropped["refused"], cloud.has(topic, big))
			}
		})
	}
}

func (h *timedLog) dump() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range *h.recs {
		fmt.Fprintf(&b, "%s %s %s %v\n", r.at.Format("15:04:05.000"), r.level, r.msg, r.attrs)
	}
	return b.String()
}
