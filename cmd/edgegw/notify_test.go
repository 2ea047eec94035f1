package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// notifySocket is a fake systemd: a unixgram socket collecting sd_notify
// datagrams.
type notifySocket struct {
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string
	done chan struct{}
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ns := &notifySocket{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(ns.done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ns.mu.Lock()
			ns.msgs = append(ns.msgs, string(buf[:n]))
			ns.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-ns.done })
	t.Setenv("NOTIFY_SOCKET", path)
	return ns
}

func (ns *notifySocket) count(prefix string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := 0
	for _, m := range ns.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// TestSystemdNotify checks READY=1, periodic WATCHDOG=1 only while the
// gateway answers its probe, STATUS= and STOPPING=1.
func TestSystemdNotify(t *testing.T) {
	ns := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100ms: pings every 50ms
	t.Setenv("WATCHDOG_PID", "")

	var wedged atomic.Bool
	unwedge := make(chan struct{})
	defer close(unwedge)
	sv := supervisor{
		log: slog.New(slog.DiscardHandler),
		probe: func() bool {
			return probe(func() {
				if wedged.Load() {
					<-unwedge // a gateway stuck on a lock
				}
			}, 30*time.Millisecond)
		},
		status: func() string { return "3 clients connected" },
		reload: func() {},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- sv.run(ctx) }()

	testutil.Eventually(t, 5*time.Second, "READY=1", func() bool { return ns.count("READY=1") == 1 })
	testutil.Eventually(t, 5*time.Second, "three watchdog pings", func() bool { return ns.count("WATCHDOG=1") >= 3 })
	if ns.count("STATUS=3 clients connected") == 0 {
		t.Fatal("no STATUS= line")
	}

	// Wedged: no pings for many intervals.
	wedged.Store(true)
	time.Sleep(60 * time.Millisecond) // let a ping already under way land
	before := ns.count("WATCHDOG=1")
	time.Sleep(500 * time.Millisecond) // ten watchdog half-intervals
	if after := ns.count("WATCHDOG=1"); after != before {
		t.Fatalf("%d watchdog pings while wedged", after-before)
	}
	// Recovered: pings resume.
	wedged.Store(false)
	testutil.Eventually(t, 5*time.Second, "pings after recovery", func() bool { return ns.count("WATCHDOG=1") > before })

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "STOPPING=1", func() bool { return ns.count("STOPPING=1") == 1 })
}
