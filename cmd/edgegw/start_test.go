package main

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestFailedStartReleasesWhatItTook: when the metrics address cannot be
// bound after the listeners were bound and a bridge's spool was opened, the
// start fails and releases both (the spool's directory lock, the listening
// socket), so a corrected start in the same process works.
func TestFailedStartReleasesWhatItTook(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free := freePort(t)

	cfg := config.Default()
	cfg.Metrics.Address = busy.Addr().String()
	cfg.Persistence.Dir = t.TempDir()
	first := config.DefaultListener(config.ListenerTCP)
	first.Name, first.Address = "first", free
	cfg.Listeners = []config.Listener{first}
	b := config.DefaultBridge()
	b.Name, b.ClientID, b.Addresses = "cloud", "edge-test", []string{"tcp://127.0.0.1:1"}
	topic := config.DefaultBridgeTopic()
	topic.Pattern = "sensors/#"
	b.Topics = []config.BridgeTopic{topic}
	cfg.Bridges = []config.Bridge{b}

	log := slog.New(slog.DiscardHandler)
	if err := run(context.Background(), cfg, log); err == nil {
		t.Fatal("start with a busy metrics address succeeded")
	}
	// The listener's address and the spool are free again.
	cfg.Metrics.Address = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, log) }()
	testutil.Eventually(t, 10*time.Second, "corrected start listening", func() bool {
		c, err := net.Dial("tcp", free)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	select {
	case err := <-done:
		t.Fatalf("corrected start failed: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
}
