package bridge_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestPeriodBudgetHeld: a bridge with a period budget of 20,000 bytes is
// offered three times that in bulk readings. The bytes it writes to the
// uplink stay within the budget plus one message (whatever it spends on
// protocol is counted too), the budget is used (not under-used by more
// than 5 %), high alarms still go after it ran out, the rest of the bulk
// waits in the spool, and after a restart of the bridge (same spool
// directory, same period) the bulk still waits. Over MQTT 3.1.1 and
// MQTT 5 alike.
func TestPeriodBudgetHeld(t *testing.T) {
	for _, proto := range []string{bridge.Protocol311, bridge.Protocol5} {
		t.Run(proto, func(t *testing.T) { testPeriodBudget(t, proto) })
	}
}

func testPeriodBudget(t *testing.T, proto string) {
	const budget, n = 20000, 600 // 600 readings of ~100 bytes on the wire: 3x the budget
	up := startMosquitto(t)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", "tcp://"+up.addr())
	cfg.Protocol = proto
	cfg.BudgetBytes, cfg.BudgetPeriod = budget, time.Hour
	cfg.Topics = []bridge.Rule{
		{Pattern: "alarms/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/", Priority: "high"},
		{Pattern: "bulk/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/", Priority: "bulk"},
	}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", 1)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	payload := strings.Repeat("x", 80)
	for i := range n {
		publish(t, lc, "bulk/t", 1, strconv.Itoa(i)+payload)
	}
	testutil.Eventually(t, 10*time.Second, "the budget used", func() bool { return b.Stats().BudgetUsed >= budget })
	publish(t, lc, "alarms/a", 1, "alarm1")
	testutil.Eventually(t, 10*time.Second, "the alarm upstream", func() bool { return upSub.has("site/alarms/a", "alarm1") })
	st := b.Stats()
	bulkUp := upSub.count("site/bulk/t")
	const oneMessage = 200
	alarm := 2 + len("site/alarms/a") + 2 + len("alarm1") + 5
	if st.Protocol != proto {
		t.Fatalf("uplink protocol %q, want %s", st.Protocol, proto)
	}
	t.Logf("BUDGET MQTT %s, %d bytes per hour, %d bulk readings offered (%d bytes of topic and payload): %d bulk upstream, %d bytes used (%.1f%% of the budget), alarm delivered, %d still in the spool",
		proto, budget, n, n*(len("site/bulk/t")+len(payload)+3), bulkUp, st.BudgetUsed, 100*float64(st.BudgetUsed)/budget, st.SpoolMessages)
	if st.BudgetUsed > int64(budget+oneMessage+alarm) || st.BudgetUsed < budget*95/100 {
		t.Errorf("used %d bytes of a %d budget", st.BudgetUsed, budget)
	}
	if st.BudgetLimit != budget || !st.BudgetEnd.Equal(st.BudgetStart.Add(time.Hour)) || st.BudgetStart.After(time.Now()) {
		t.Errorf("stats say a budget of %d from %v to %v", st.BudgetLimit, st.BudgetStart, st.BudgetEnd)
	}
	if bulkUp >= n/2 || st.SpoolMessages < int64(n/2) {
		t.Errorf("%d bulk upstream, %d in the spool: the budget did not hold them", bulkUp, st.SpoolMessages)
	}

	// A restart in the same period: the budget is still used up.
	b.stop(t)
	b2 := runBridge(t, cfg, gw.srv)
	b2.waitState(t, bridge.Connected)
	publish(t, lc, "alarms/a", 1, "alarm2")
	testutil.Eventually(t, 10*time.Second, "the alarm after the restart", func() bool { return upSub.has("site/alarms/a", "alarm2") })
	if after := upSub.count("site/bulk/t"); after != bulkUp {
		t.Errorf("%d more bulk readings went after a restart in a used-up period", after-bulkUp)
	}
	if st := b2.Stats(); st.BudgetUsed < budget {
		t.Errorf("after the restart the budget says %d used", st.BudgetUsed)
	}
}

// TestRateLimitHeld: with rate_limit, the bytes written to the uplink
// never exceed the rate times the time taken, plus one second's burst and
// one message (a slow machine only makes the time longer). Over MQTT
// 3.1.1 and MQTT 5 alike.
func TestRateLimitHeld(t *testing.T) {
	for _, proto := range []string{bridge.Protocol311, bridge.Protocol5} {
		t.Run(proto, func(t *testing.T) { testRateLimit(t, proto) })
	}
}

func testRateLimit(t *testing.T, proto string) {
	const rate, n = 20000, 400 // ~40 KB: about 2 s at the limit
	up := startMosquitto(t)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", "tcp://"+up.addr())
	cfg.Protocol = proto
	cfg.RateLimit = rate
	cfg.Topics = []bridge.Rule{{Pattern: "bulk/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/"}}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", 1)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	start := time.Now()
	publishBacklog(t, lc, "bulk/t", 1, strings.Repeat("x", 80)+"-", n)
	testutil.Eventually(t, 30*time.Second, "everything upstream", func() bool { return countDistinct(upSub.all(), "site/bulk/t") == n })
	elapsed := time.Since(start)
	st := b.Stats()
	used := st.BudgetUsed
	if st.Protocol != proto {
		t.Fatalf("uplink protocol %q, want %s", st.Protocol, proto)
	}
	t.Logf("RATE-LIMIT MQTT %s, %d B/s: %d readings, %d bytes written in %s (%.0f B/s); the sender waited %s for the bucket",
		proto, rate, n, used, elapsed.Round(time.Millisecond), float64(used)/elapsed.Seconds(), st.RateWaited.Round(time.Millisecond))
	// 40 KB at 20 KB/s with one second's burst: within a second the
	// sender must have waited for the bucket (a machine slower than the
	// limit need not), and never longer than it all took.
	if st.RateLimit != rate || (st.RateWaited == 0 && elapsed < time.Second) || st.RateWaited > elapsed {
		t.Errorf("stats say rate limit %d, waited %s of %s", st.RateLimit, st.RateWaited, elapsed)
	}
	if limit := rate*elapsed.Seconds() + rate + 200; float64(used) > limit {
		t.Errorf("%d bytes in %s: more than rate x time + one second + one message (%.0f)", used, elapsed, limit)
	}
}
