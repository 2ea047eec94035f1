package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

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
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const n = 400
	bin := buildEdgegw(t)
	addr, maddr := freePort(t), freePort(t)
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listeners: [{name: lan, address: %q}]\nmetrics: {address: %q}\n", addr, maddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdgegw(t, bin, "--config", cfg)
	testutil.Eventually(t, 10*time.Second, "metrics served", func() bool { return metricValue(t, maddr, "edgegw_connections") == 0 })
	goMemory := func() float64 {
		return metricValue(t, maddr, "go_memstats_heap_inuse_bytes") + metricValue(t, maddr, "go_memstats_stack_inuse_bytes")
	}
	before := goMemory()

	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
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
		return metricValue(t, maddr, "edgegw_connections") == n
	})
	per := (goMemory() - before) / n
	t.Logf("%d idle connections: %.0f bytes of Go heap and stack each", n, per)
	if per > idleConnBound {
		t.Errorf("an idle connection holds %.0f bytes of heap and stack, docs/config.md promises at most %d", per, idleConnBound)
	}
}
