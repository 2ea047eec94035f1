package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryKeepsGCHeadroom: the shipped binary keeps limits.gc_headroom
// (internal/gcheadroom): with its small live heap the GC percent it runs
// at rises above gc_percent 50 once it has collected, so the heap may grow
// 8 MiB between collections; with gc_headroom 0 it stays at gc_percent,
// and GOGC in the environment is left alone. The starting line says which.
func TestBinaryKeepsGCHeadroom(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	for _, tc := range []struct {
		name, limits, env string
		percent           func(float64) bool
		logs              string
	}{
		{"default", "", "", func(p float64) bool { return p > 50 }, "gc_percent=50 gc_headroom=8MiB"},
		{"off", "limits: {gc_headroom: 0}", "", func(p float64) bool { return p == 50 }, "gc_percent=50 gc_headroom=0"},
		{"GOGC", "", "300", func(p float64) bool { return p == 300 }, "gc_percent=0 gc_headroom=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, maddr := freePort(t), freePort(t)
			cfg := writeConfig(t, fmt.Sprintf(`
log: {level: info}
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
%s
`, addr, maddr, tc.limits))
			t.Setenv("GOGC", tc.env)
			g := startEdgegw(t, bin, "--config", cfg)
			waitListening(t, addr)
			c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("garbage"))
			if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("connect: %v", tok.Error())
			}
			defer c.Disconnect(0)
			// Each 64 KiB publish is read into a buffer of its own and
			// dropped (no subscriber): garbage, so the binary collects.
			payload := make([]byte, 64<<10)
			gcs := func() float64 { return metricValue(t, maddr, "go_gc_duration_seconds_count") }
			start := gcs()
			testutil.Eventually(t, 20*time.Second, "two collections and the GC percent", func() bool {
				for range 64 {
					c.Publish("garbage", 0, false, payload)
				}
				return gcs() >= start+2 && tc.percent(metricValue(t, maddr, "go_gc_gogc_percent"))
			})
			if p := metricValue(t, maddr, "go_gc_gogc_percent"); !tc.percent(p) {
				t.Fatalf("go_gc_gogc_percent %v after collections", p)
			}
			if !strings.Contains(g.logs(), tc.logs) {
				t.Fatalf("starting line lacks %q:\n%s", tc.logs, g.logs())
			}
		})
	}
}
