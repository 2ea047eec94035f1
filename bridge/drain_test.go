package bridge_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// arrival is a message received upstream and when.
type arrival struct {
	rx
	at time.Time
}

// timedCollector records messages with their arrival time.
type timedCollector struct {
	mu   sync.Mutex
	msgs []arrival
}

func (c *timedCollector) handle(_ mqtt.Client, m mqtt.Message) {
	a := arrival{rx{m.Topic(), string(m.Payload()), m.Qos(), m.Retained()}, time.Now()}
	c.mu.Lock()
	c.msgs = append(c.msgs, a)
	c.mu.Unlock()
}

func (c *timedCollector) all() []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func (c *timedCollector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// subProcess records what a mosquitto_sub process prints, one "topic
// payload" line per message, timed as it is read. mosquitto_sub, not a
// paho client: a subscriber that falls behind by 1000 messages has
// messages dropped by a default mosquitto (even at QoS 0), and a Go
// client under -race does fall behind a fast drain.
func subProcess(t *testing.T, addr, filter string) *timedCollector {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-t", filter, "-q", "0", "-v", "-i", "drain-sub")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("mosquitto_sub (Debian package mosquitto-clients, scripts/install-test-deps.sh): %v", err)
	}
	c := &timedCollector{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			topic, payload, _ := strings.Cut(sc.Text(), " ")
			a := arrival{rx{topic: topic, payload: payload}, time.Now()}
			c.mu.Lock()
			c.msgs = append(c.msgs, a)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	return c
}

// drainCase is one backlog drained over a slow link.
type drainCase struct {
	name    string
	n       int           // backlog messages
	qos     func(int) int // QoS of backlog message i
	oneWay  time.Duration // link delay each way
	rate    int           // link bytes/s each way (0: unlimited)
	payload int           // payload bytes of a backlog message
	opens   bool          // the byte window must open past its start (QoS 1 only, unlimited link)
}

// TestDrainOverSlowLink is issue 20: after an outage the backlog drains at
// what the link carries, not at a fixed window per round trip, into a
// Debian mosquitto with its default configuration (QoS 2 quota 20), while
// a live sensor keeps publishing. Every backlog and live message arrives;
// first copies in order; QoS 2 exactly once. The rates are logged (DRAIN
// lines), not asserted: `make bench` measures them against mosquitto's
// own bridge. EDGEGW_DRAIN_SCALE=10 runs ten times the backlogs.
func TestDrainOverSlowLink(t *testing.T) {
	scale := 1
	if v, err := strconv.Atoi(os.Getenv("EDGEGW_DRAIN_SCALE")); err == nil && v > 0 {
		scale = v
	}
	const rtt50 = 25 * time.Millisecond
	cases := []drainCase{
		{name: "qos1-50ms", n: 20000 * scale, qos: func(int) int { return 1 }, oneWay: rtt50, payload: 64, opens: true},
		// QoS 2 stays within mosquitto's quota of 20 flows: 20 per
		// two round trips (PUBLISH..PUBREC, PUBREL..PUBCOMP).
		{name: "qos2-50ms", n: 1000 * scale, qos: func(int) int { return 2 }, oneWay: rtt50, payload: 64},
		{name: "mixed-50ms", n: 4000 * scale, qos: func(i int) int { return 1 + min(1, i%10/9) }, oneWay: rtt50, payload: 64},
		// 1 Mbit/s: about 1,000 such messages a second.
		{name: "qos1-1mbit", n: 3000 * scale, qos: func(int) int { return 1 }, oneWay: rtt50, rate: 125000, payload: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testDrain(t, tc) })
	}
}

func testDrain(t *testing.T, tc drainCase) {
	up := startMosquittoDefault(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.setLink(tc.oneWay, tc.rate)
	fl := watchFlows(px)
	px.Refuse(true) // the outage

	cfg := testConfig(t, "b1", px.url())
	cfg.MaxInflight, cfg.MaxInflightQoS2 = 0, 0 // the defaults: auto, 20
	cfg.CleanSession = false
	cfg.AckTimeout = 5 * time.Second
	cfg.Topics = []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: 2, RemotePrefix: "site-a/"}}
	b := runBridge(t, cfg, gw.srv)

	// QoS 0 upstream: no ack flow to slow the subscriber down; each
	// message reaches it once as mosquitto got it, so a message missing
	// was lost and one twice was sent twice (by the bridge).
	upSub := subProcess(t, up.addr(), "site-a/#")
	upc := client(t, up.addr(), "up-ready")
	testutil.Eventually(t, 10*time.Second, "mosquitto_sub subscribed", func() bool {
		publish(t, upc, "site-a/ready", 0, "r")
		return upSub.len() > 0
	})

	lc := client(t, gw.addr, "local-pub")
	pad := strings.Repeat("x", tc.payload)
	toks := make([]mqtt.Token, tc.n)
	for i := range toks {
		p := "m" + strconv.Itoa(i) + " "
		toks[i] = lc.Publish("sensors/t1", byte(tc.qos(i)), false, p+pad[:max(0, tc.payload-len(p))])
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			t.Fatalf("local publish %d: %v", i, tok.Error())
		}
	}
	testutil.Eventually(t, 10*time.Second, "the backlog in the spool", func() bool { return b.Stats().SpoolMessages == int64(tc.n) })

	// The live sensor: 20 msg/s, at the QoS of the first backlog message,
	// its send time in the payload.
	live := client(t, gw.addr, "live-pub")
	stopLive := make(chan struct{})
	var wg sync.WaitGroup
	var liveSent int
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopLive:
				return
			case <-tick.C:
			}
			tok := live.Publish("sensors/live", byte(tc.qos(0)), false, fmt.Sprintf("%d %d", liveSent, time.Now().UnixNano()))
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Errorf("live publish %d: %v", liveSent, tok.Error())
				return
			}
			liveSent++
		}
	}()

	up0 := time.Now()
	px.Refuse(false)
	var maxWindow, maxBytes int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := b.Stats()
		maxWindow, maxBytes = max(maxWindow, st.Window), max(maxBytes, st.InFlightBytes)
		if upSub.len() >= tc.n && countDistinct(rxOf(upSub.all()), "site-a/sensors/t1") == tc.n {
			break
		}
		if time.Now().After(deadline) {
			got := map[string]bool{}
			for _, a := range upSub.all() {
				if a.topic == "site-a/sensors/t1" {
					got[strings.Fields(a.payload)[0]] = true
				}
			}
			var missing []string
			for i := range tc.n {
				if m := "m" + strconv.Itoa(i); !got[m] {
					missing = append(missing, m)
				}
			}
			t.Fatalf("the backlog upstream: %d of %d arrived; missing %d, first %v; bridge %+v",
				len(got), tc.n, len(missing), missing[:min(10, len(missing))], st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stopLive)
	wg.Wait()
	testutil.Eventually(t, 30*time.Second, "every live message", func() bool {
		return countDistinct(rxOf(upSub.all()), "site-a/sensors/live") == liveSent
	})

	all := upSub.all()
	var first, last time.Time
	var lat []time.Duration
	for _, a := range all {
		switch a.topic {
		case "site-a/sensors/t1":
			if first.IsZero() {
				first = a.at
			}
			last = a.at
		case "site-a/sensors/live":
			var seq, ns int64
			if _, err := fmt.Sscanf(a.payload, "%d %d", &seq, &ns); err != nil {
				t.Fatalf("live payload %q: %v", a.payload, err)
			}
			lat = append(lat, a.at.Sub(time.Unix(0, ns)))
		}
	}
	slices.Sort(lat)
	drain := last.Sub(up0)
	st := b.Stats()
	t.Logf("DRAIN %s: %d messages, rtt %s, rate %d B/s: drained %s after the uplink came back (%.0f msg/s, %.0f msg/s from the first arrival); "+
		"live %d p50 %s p99 %s; unacked at the proxy max %d, window max %d B, in flight max %d B, min rtt %s; link use %.0f%%",
		tc.name, tc.n, 2*tc.oneWay, tc.rate, drain.Round(time.Millisecond), float64(tc.n)/drain.Seconds(),
		float64(tc.n)/last.Sub(first).Seconds(), len(lat), pct(lat, 50), pct(lat, 99),
		fl.maxOutstanding(), maxWindow, maxBytes, st.MinRTT.Round(time.Millisecond), linkUse(px, tc, drain))

	// First copies in order within each QoS (the broker releases a QoS 2
	// message at PUBREL, so a QoS 1 message sent after it may arrive
	// first: MQTT orders messages of one QoS); count the duplicates.
	dups, dup2 := 0, 0
	seen := map[int]bool{}
	var order [3][]int // backlog indexes by QoS, in local order
	for i := range tc.n {
		order[tc.qos(i)] = append(order[tc.qos(i)], i)
	}
	var next [3]int
	for _, a := range all {
		if a.topic != "site-a/sensors/t1" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(strings.Fields(a.payload)[0], "m"))
		if err != nil {
			t.Fatalf("payload %q: %v", a.payload, err)
		}
		switch {
		case seen[i]:
			dups++
			if tc.qos(i) == 2 {
				dup2++
			}
		case i != order[tc.qos(i)][next[tc.qos(i)]]:
			t.Fatalf("out of order: got m%d, want m%d (QoS %d)", i, order[tc.qos(i)][next[tc.qos(i)]], tc.qos(i))
		default:
			seen[i] = true
			next[tc.qos(i)]++
		}
	}
	t.Logf("DRAIN %s: %d duplicates, %d of them QoS 2; sent %d, acked %d", tc.name, dups, dup2, st.Sent, st.Acked)
	if dup2 != 0 {
		t.Errorf("%d QoS 2 duplicates; want exactly once", dup2)
	}
	if st.SpoolDropped != 0 {
		t.Errorf("spool dropped %d", st.SpoolDropped)
	}
	if tc.qos(0) == 2 && fl.maxOutstanding() > bridge.DefaultMaxInflightQoS2 {
		t.Errorf("%d QoS 2 flows in flight at once, above mosquitto's quota %d", fl.maxOutstanding(), bridge.DefaultMaxInflightQoS2)
	}
	if tc.opens && maxWindow <= 64<<10 {
		// Not a speed: the window grew past its initial 64 KiB.
		t.Errorf("window at most %d bytes over a 50 ms round trip: it did not open", maxWindow)
	}
}

func rxOf(as []arrival) []rx {
	out := make([]rx, len(as))
	for i, a := range as {
		out[i] = a.rx
	}
	return out
}

// pct returns the p-th percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)].Round(time.Millisecond)
}

// linkUse is the share of a rate-limited link's capacity the bridge used
// while draining (0 for an unlimited link).
func linkUse(px proxy, tc drainCase, drain time.Duration) float64 {
	if tc.rate == 0 {
		return 0
	}
	return 100 * float64(px.Bytes(testutil.Up)) / (float64(tc.rate) * drain.Seconds())
}
