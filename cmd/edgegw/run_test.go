package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of the running binary as a whole: clients of every MQTT version,
// its HTTP endpoints, signals, a taken port, and what a connection costs.

// TestBinaryWithMosquittoClients runs the real binary with a config and
// talks to it with mosquitto_sub/mosquitto_pub, then checks /metrics,
// /healthz, SIGHUP reload and a clean SIGTERM stop.
func TestBinaryWithMosquittoClients(t *testing.T) {
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs mosquitto-clients): %v", tool, err)
		}
	}
	g := newHarness(t)
	g.Cfg.Log = &logConf{Level: "info"}
	g.Start()
	host, port := hostPort(g.Addr)
	for _, v := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sub := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-V", v, "-t", "#", "-v", "-C", "1", "-W", "15", "-q", "2")
			got := publishUntilPrinted(t, sub, func() *exec.Cmd {
				return exec.CommandContext(ctx, "mosquitto_pub", "-h", host, "-p", port, "-V", v, "-t", "a/b", "-m", "hi", "-q", "2")
			}, 15*time.Second)
			if strings.TrimSpace(got) != "a/b hi" {
				t.Fatalf("mosquitto_sub printed %q", got)
			}
		})
	}

	if _, ok := g.MetricsMap()["edgegw_messages_received_total"]; !ok {
		t.Fatalf("/metrics lacks edgegw counters: %v", g.MetricsMap())
	}
	if code, body := g.Healthz(); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}

	// SIGHUP with a changed log level reloads without dropping the listener.
	g.Cfg.Log.Level = "debug"
	g.Reload()
	if !strings.Contains(g.Logs(), "log_level=debug") {
		t.Fatalf("reload did not log the new level")
	}
	g.Stop()
}

// TestBinaryPortTakenExitsOne holds docs/install.md's "A port that another
// program holds is retried (exit status 1): that program may go away" (the
// unit's RestartPreventExitStatus=2 must not cover it), for a listener and
// for metrics.address, and docs/config.md's message for a taken metrics
// port, word for word.
func TestBinaryPortTakenExitsOne(t *testing.T) {
	held, err := net.Listen("tcp", freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	free := freePort(t)

	for _, tc := range []struct {
		name              string
		listener, metrics string
		want              []string
	}{
		{"listener", taken, "",
			[]string{"listener lan: listen tcp " + taken + ": bind: address already in use"}},
		{"metrics", free, taken,
			[]string{
				// docs/config.md, ### metrics, with the address in use.
				"metrics.address " + taken + ": listen tcp " + taken + ": bind: address already in use" +
					` (another program listens there, ss -ltnp shows which; change metrics.address in the config, or set it to \"\" to turn metrics off)`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newHarness(t)
			g.Cfg.Listeners[0].Address = tc.listener
			g.Cfg.Metrics.Address = tc.metrics
			g.Launch()
			if code := g.WaitExit(); code != exitFailure {
				t.Fatalf("exit %d, want status 1 (systemd retries it)", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(g.Logs(), w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

// idleConnBound is what docs/config.md promises an idle connection costs
// the gateway at most: Go heap plus goroutine stacks, per connection.
// Measured about 10.3-10.7 KiB (2.1-2.4 KiB of heap and one 8 KiB
// goroutine stack) with 500, 1000 and 2000 idle 3.1.1 connections, amd64.
const idleConnBound = 16 << 10

// TestBinaryIdleConnectionMemory holds docs/config.md's "Right after its
// CONNECT the Go runtime counts about 10 KiB for it ... under 16 KiB": the
// binary with 400 idle MQTT 3.1.1
// connections over real TCP holds at most idleConnBound more heap and
// stack per connection than with none.
func TestBinaryIdleConnectionMemory(t *testing.T) {
	const n = 400
	g := newHarness(t).Start()
	goMemory := func() float64 {
		return g.Metric("go_memstats_heap_inuse_bytes") + g.Metric("go_memstats_stack_inuse_bytes")
	}
	before := goMemory()

	for i := range n {
		c, err := net.DialTimeout("tcp", g.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		id := fmt.Sprintf("idle-%03d", i)
		// CONNECT, MQTT 3.1.1, clean session, keepalive 60 s.
		body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, byte(len(id))}, id...)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
			t.Fatal(err)
		}
		ack := make([]byte, 4)
		if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
			t.Fatalf("connection %d: CONNACK % x, %v", i, ack, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "all connections counted", func() bool {
		return g.Metric("edgegw_connections") == n
	})
	per := (goMemory() - before) / n
	t.Logf("%d idle connections: %.0f bytes of Go heap and stack each", n, per)
	if per > idleConnBound {
		t.Errorf("an idle connection holds %.0f bytes of heap and stack, docs/config.md promises at most %d", per, idleConnBound)
	}
}
