package bridge

// Garbage per message (issue 16). At a sensor fleet's rate the bridge's
// allocations per reading set how often the GC runs, and the GC was a
// visible part of the process's CPU. These tests count the allocations of
// the per-message steps on real parts (a real 127.0.0.1 socket for the
// batch writer); allocation counts are deterministic, so they assert an
// upper bound. BenchmarkQoS1ReadingUpstream measures the whole path, one
// reading at a time, into a real mosquitto.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
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

// tcpPair returns both ends of a real 127.0.0.1 connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A packet through the batch writer, one flush each (a trickle: the
// flusher is idle at every Write), allocates nothing: the channel a Write
// waits on for room is made only when a Write waits (it was one per
// flush).
func TestBatchWriterFlushAllocatesNothing(t *testing.T) {
	client, server := tcpPair(t)
	w := newBatchWriter(client, rawSocket(client), 5*time.Second, func(error) {})
	defer w.abort()
	pkt := appendPublish311(nil, spool.Message{Topic: "site-a/sensors/t", Payload: make([]byte, 100), QoS: 1}, 7)
	buf := make([]byte, len(pkt))
	n := testing.AllocsPerRun(500, func() {
		if _, err := w.Write(pkt); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf); err != nil { // the flush happened
			t.Fatal(err)
		}
	})
	want := 0.0
	if raceBuild { // the race detector allocates once per flush (3 before the change, 1 after)
		want = 1
	}
	if n > want {
		t.Errorf("%.1f allocations per packet written and flushed, want %.0f", n, want)
	}
}

// A Write waiting for room (maxPending buffered) is released when the
// flusher takes the buffer.
func TestBatchWriterWaiterWokenByFlush(t *testing.T) {
	client, server := tcpPair(t)
	w := newBatchWriter(client, rawSocket(client), 10*time.Second, func(error) {})
	defer w.abort()
	big := make([]byte, maxPending)
	// The peer does not read yet: the flusher's write of the first
	// buffers fills the socket, so the later Writes must wait for room.
	wrote := make(chan error, 1)
	go func() {
		for range 64 {
			if _, err := w.Write(big); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	testutil.Eventually(t, 10*time.Second, "a Write waiting for room", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.room != nil
	})
	if _, err := io.CopyN(io.Discard, server, 64*maxPending); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// A direct QoS 1 publish's entry in the store is one allocation, the
// entry: its done channel is made only if something other than its acker
// waits for it (it was two: the entry and the channel).
func TestDirectPublishEntryIsOneAllocation(t *testing.T) {
	s := newUplinkStore(func(spool.ID) {})
	m := spool.Message{Topic: "site-a/sensors/t", Payload: make([]byte, 100), QoS: 1}
	rec := spool.ID(1)
	n := testing.AllocsPerRun(1000, func() {
		w := wireID(rec)
		e := s.announceDirect(rec, w, m)
		if !s.completeDirect(w) || !e.ended.Load() {
			t.Fatal("not completed")
		}
		rec++
	})
	if n > 1 {
		t.Errorf("%.1f allocations per direct publish announced and completed, want at most 1", n)
	}
}

// The waiters other than the acker still see a direct publish end: a
// stop's drain (doneChans) and a QoS 2 publish whose id it holds
// (pickWire) get a channel that its completion closes; the acker is woken
// through directEnded.
func TestDirectPublishDoneForOtherWaiters(t *testing.T) {
	s := newUplinkStore(func(spool.ID) {})
	m := spool.Message{Topic: "t", Payload: []byte("x"), QoS: 1}
	e := s.announceDirect(1, wireID(1), m)
	chs := s.doneChans()
	_, busy := s.pickWire(1+65535, 2) // the QoS 2 record 65535 later needs its id
	if len(chs) != 1 || busy == nil {
		t.Fatalf("doneChans %d, busy %v", len(chs), busy)
	}
	select {
	case <-chs[0]:
		t.Fatal("done before its PUBACK")
	default:
	}
	s.completeDirect(wireID(1))
	for _, ch := range []<-chan struct{}{chs[0], busy, s.directEnded} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not released by the PUBACK")
		}
	}
	if !e.ended.Load() {
		t.Fatal("not ended")
	}
	s.mu.Lock()
	late := e.doneLocked() // asked for after it ended
	s.mu.Unlock()
	select {
	case <-late:
	default:
		t.Fatal("the done of an ended flow is open")
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
