package bridge

// Garbage per message (issue 16). At a sensor fleet's rate the bridge's
// allocations per reading set how often the GC runs, and the GC was a
// visible part of the process's CPU. These tests count the allocations of
// the per-message steps; allocation counts are deterministic, so they
// assert an upper bound. BenchmarkQoS1ReadingUpstream measures the whole path, one
// reading at a time, into a real mosquitto.

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
)

// A publish's room in the send window costs nothing when the sender does
// not wait for it: a channel is made only for a sender that waits, not at
// every release (it was one per ack).
func TestWindowAcquireReleaseAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	for _, auto := range []bool{true, false} {
		w := newSendWindow(16, 16, auto, time.Now())
		n := testing.AllocsPerRun(1000, func() {
			st, ok := w.acquire(ctx, 110, 1)
			if !ok {
				t.Fatal("no room in an empty window")
			}
			w.release(st, time.Now())
		})
		if n != 0 {
			t.Errorf("auto %v: %.1f allocations per acquire and release, want 0", auto, n)
		}
	}
}

// A sender waiting for room is still woken by a release (the channel is
// made by the waiter, under the lock it found no room under).
func TestWindowWaiterWokenByRelease(t *testing.T) {
	w := newSendWindow(1, 1, false, time.Now())
	st, _ := w.acquire(context.Background(), 10, 1)
	got := make(chan bool)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st2, ok := w.acquire(ctx, 10, 1)
		if ok {
			w.release(st2, time.Now())
		}
		got <- ok
	}()
	testutil.Eventually(t, 10*time.Second, "the sender waiting", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.wake != nil
	})
	w.release(st, time.Now())
	if !<-got {
		t.Fatal("the waiting sender was not woken by the release")
	}
}

// noGateway is a bridge.Gateway that registers nothing: the benchmark
// hands messages to the bridge's sink itself.
type noGateway struct{}

func (noGateway) Publish(*gateway.Message) error             { return nil }
func (noGateway) AddSink(string, string, gateway.Sink) error { return nil }
func (noGateway) RemoveSink(string, string)                  {}

// BenchmarkQoS1ReadingUpstream is the bridge's path of one sensor
// reading at a time (the rate of a sensor fleet: nothing else in flight):
// a local QoS 1 message into the sink (AcceptAsync), the spool, the
// sender, the uplink's write, mosquitto's PUBACK, the acker and the
// spool's ack. allocs/op and B/op are the garbage per reading (the
// spool's included).
func BenchmarkQoS1ReadingUpstream(b *testing.B) {
	port := testutil.FreePort(b)
	testutil.StartMosquitto(b, fmt.Sprintf("allow_anonymous true\npersistence false\nlog_dest none\nlistener %d 127.0.0.1\n", port), port)
	cfg := Config{
		Name: "bench", Addresses: []string{fmt.Sprintf("tcp://127.0.0.1:%d", port)}, ClientID: "edge-bench",
		CleanSession: true, KeepAlive: 30 * time.Second, ConnectTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, AckTimeout: 10 * time.Second, MaxInflight: MaxInflightAuto,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		SpoolDir: b.TempDir(), SpoolSync: "batch", SpoolSyncInterval: 5 * time.Millisecond,
		Topics: []Rule{{Pattern: "sensors/#", Direction: Out, QoS: 1, RemotePrefix: "site-a/"}},
	}
	br, err := New(cfg, noGateway{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- br.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}()
	testutil.Eventually(b, 10*time.Second, "connected", func() bool { return br.Stats().State == Connected })
	k := sink{br}
	m := &gateway.Message{Topic: "sensors/t", Payload: make([]byte, 100), QoS: 1}
	failed := make(chan error, 1)
	done := func(err error) {
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		deadline := time.Now().Add(10 * time.Second)
		k.AcceptAsync(m, done)
		for br.acked.Load() < uint64(i+1) { // its PUBACK came back
			select {
			case err := <-failed:
				b.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				b.Fatalf("reading %d not acked within 10s", i)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}
