package spool

import (
	"context"
	"testing"
	"time"
)

func benchAppend(b *testing.B, mode SyncMode, parallelism int) {
	s := openT(b, Options{Dir: b.TempDir(), Sync: mode, SyncInterval: DefaultSyncInterval, MaxBytes: 1 << 30})
	msg := Message{Topic: "site-a/sensors/temp/42", Payload: make([]byte, 256), QoS: 1}
	before, wbefore := s.Stats().Syncs, s.Stats().BytesWritten
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := s.Append(ctx, msg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(s.Stats().Syncs-before)/float64(b.N), "fsyncs/msg")
	b.ReportMetric(float64(s.Stats().BytesWritten-wbefore)/float64(b.N), "disk-B/msg")
}

// BenchmarkAppendBatch: 64 appenders per CPU share group commits (SyncBatch,
// 20ms window). Throughput is bounded by appenders/window, by design.
func BenchmarkAppendBatch(b *testing.B) { benchAppend(b, SyncBatch, 64) }

// BenchmarkAppendAlways: the same with an fsync per (shared) commit.
func BenchmarkAppendAlways(b *testing.B) { benchAppend(b, SyncAlways, 64) }

// BenchmarkAppendNone: the raw cost of an append (pwrite, no fsync).
func BenchmarkAppendNone(b *testing.B) { benchAppend(b, SyncNone, 1) }

// BenchmarkNextAck: the uplink side, reading back and acking.
func BenchmarkNextAck(b *testing.B) {
	s := openT(b, Options{Dir: b.TempDir(), Sync: SyncNone, MaxBytes: 1 << 30, SyncInterval: time.Millisecond})
	msg := Message{Topic: "site-a/sensors/temp/42", Payload: make([]byte, 256), QoS: 1}
	ctx := context.Background()
	for range b.N {
		if _, err := s.Append(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var after ID
	for range b.N {
		id, _, err := s.Next(ctx, after)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ack(id); err != nil {
			b.Fatal(err)
		}
		after = id
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkAppendAsync: ONE goroutine issues b.N AppendAsync calls (at most
// 4096 in flight) in SyncBatch mode with the default 20ms window, and waits
// for every done. "windows" is the elapsed time in commit windows: with
// Append a single caller needs b.N of them.
func BenchmarkAppendAsync(b *testing.B) {
	s := openT(b, Options{Dir: b.TempDir(), Sync: SyncBatch, SyncInterval: DefaultSyncInterval, MaxBytes: 1 << 30})
	msg := Message{Topic: "site-a/sensors/temp/42", Payload: make([]byte, 256), QoS: 1}
	before := s.Stats().Syncs
	slots := make(chan struct{}, 4096)
	done := func(_ ID, err error) {
		if err != nil {
			b.Error(err)
		}
		<-slots
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		slots <- struct{}{}
		s.AppendAsync(msg, done)
	}
	for range cap(slots) {
		slots <- struct{}{}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(s.Stats().Syncs-before)/float64(b.N), "fsyncs/msg")
	b.ReportMetric(float64(b.Elapsed())/float64(DefaultSyncInterval), "windows")
}
