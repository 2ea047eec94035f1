package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/listeners"
)

// startGateway runs an in-process gateway on 127.0.0.1:0 for the test.
func startGateway(t *testing.T) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := gateway.New(gateway.Options{MaxConnections: 4096, AllowAnonymous: true}, log)
	l := &listeners.TCP{Name: "bench", Address: "127.0.0.1:0", Log: log}
	if err := l.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); l.Serve(ctx, srv.ServeConn) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return l.Addr().String()
}

func TestHist(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got) > float64(c.want)*1.04 {
			t.Errorf("q%.2f = %v, want %v (+4%%)", c.q, got, c.want)
		}
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := bucketOf(v); bucketHigh(b) < v || (b > 0 && bucketHigh(b-1) >= v) {
			t.Fatalf("value %d in bucket %d [%d]", v, b, bucketHigh(b))
		}
	}
}

// TestScenarios runs every scenario for about a second against an
// in-process gateway and checks the JSON result is sane.
func TestScenarios(t *testing.T) {
	addr := startGateway(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		ok   func(r *Result) bool
	}{
		{"fanin-q0", []string{"fanin", "--pubs", "4"}, func(r *Result) bool { return r.Received > 0 && r.MsgPerS > 0 && r.LatP99us > 0 }},
		{"fanin-q1", []string{"fanin", "--qos", "1", "--pubs", "4"}, func(r *Result) bool { return r.Received > 0 && r.Acked == r.Sent && r.Dups == 0 }},
		{"fanin-q2", []string{"fanin", "--qos", "2", "--pubs", "2"}, func(r *Result) bool { return r.Received > 0 && r.Dups == 0 }},
		{"fanout-q1", []string{"fanout", "--qos", "1", "--subs", "10"}, func(r *Result) bool { return r.Received > 0 && r.Dups == 0 }},
		{"latency", []string{"latency", "--rate", "1000"}, func(r *Result) bool { return r.Received > 500 && r.Lost == 0 && r.LatP999us > 0 }},
		{"latency-v5", []string{"latency", "--rate", "500", "--qos", "1", "--version", "5"}, func(r *Result) bool { return r.Received > 200 && r.Lost == 0 }},
		{"idle", []string{"idle", "--conns", "200", "--ready-file", filepath.Join(dir, "ready")}, func(r *Result) bool { return r.Established == 200 && r.Dropped == 0 }},
		{"slowsub", []string{"slowsub"}, func(r *Result) bool { return r.Sent > 0 && r.Cycles >= 2 }},
		{"bidir-qos2", []string{"bidir-qos2", "--count", "200", "--duration", "10s"}, func(r *Result) bool { return r.Pass != nil && *r.Pass && r.Received == 200 }},
		{"bidir-qos2-v311", []string{"bidir-qos2", "--count", "50", "--version", "4", "--duration", "10s"}, func(r *Result) bool { return r.Received == 50 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(c.args, "--addr", addr, "--json")
			if c.name != "bidir-qos2" && c.name != "bidir-qos2-v311" {
				args = append(args, "--duration", "700ms")
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			var r Result
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("exit %d, output %q is not JSON: %v (stderr %s)", code, out.String(), err, errb.String())
			}
			t.Logf("%s", bytes.TrimSpace(out.Bytes()))
			if code != 0 || r.Error != "" || !c.ok(&r) {
				t.Fatalf("exit %d, insane result: %s", code, out.String())
			}
		})
	}
}

func TestSummaryAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("unknown scenario: exit %d", code)
	}
	addr := startGateway(t)
	out.Reset()
	if code := run([]string{"latency", "--addr", addr, "--duration", "300ms", "--rate", "200"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("latency p50")) {
		t.Fatalf("summary: %s", out.String())
	}
}

func BenchmarkPublishEncode(b *testing.B) {
	// The generator's hot path must not allocate.
	c := &conn{bw: newDiscardWriter(), v: 4}
	p := newPublisher(c, time.Now(), 0, "bench/x", 0, 64, 16)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.publish(nil)
	}
}

func newDiscardWriter() *bufio.Writer { return bufio.NewWriterSize(io.Discard, 32<<10) }
