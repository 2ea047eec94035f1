package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestProbeAgainstMosquitto runs the measurement path for real: a
// mosquitto configured as the suite configures it (password file, ACL,
// anonymous off), the probe's round trips, and the /proc samples of the
// broker process.
func TestProbeAgainstMosquitto(t *testing.T) {
	// Not t.TempDir: mosquitto started as root runs as user mosquitto and
	// must traverse the directory.
	dir, err := os.MkdirTemp("", "hostile-test.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := &brokerSpec{name: "mosquitto", bin: "/usr/sbin/mosquitto", dir: dir + "/mosquitto"}
	if err := spec.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := spec.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()

	p, err := startProbe(ctx, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	deadline := t0.Add(20 * time.Second)
	for {
		p.mu.Lock()
		got := 0
		for _, s := range p.samples {
			if s.got {
				got++
			}
		}
		p.mu.Unlock()
		if got >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d probe round trips in 20 s", got)
		}
		time.Sleep(probeInterval)
	}
	samples, err := p.stop()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	w := summarize(samples, t0.Add(-time.Second), time.Now())
	// A sample lost on a loaded machine counts as lostRTT and can be the
	// p99 of 21: what is checked is that round trips are measured at all.
	if w.N < 20 || w.P99 <= 0 || w.Lost > w.N/10 || (w.Lost == 0 && w.P99 >= lostRTT) {
		t.Fatalf("probe window %+v: want >= 20 samples, at most a tenth lost, 0 < p99 < %v when none is", w, lostRTT)
	}

	// Wrong password: refused with a CONNACK; unknown ACL topic: not granted.
	if _, _, err := dialMQTT(ctx, b.addr, login{user: "bob", pass: "nope", clientID: "x", clean: true}); err == nil {
		t.Fatal("mosquitto accepted a wrong password: the config is not the suite's")
	}
	if err := wellBehaved(ctx, b.addr); err != nil {
		t.Fatalf("well-behaved check: %v", err)
	}

	m, err := readMem(b.pid)
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("broker memory %+v, %v", m, err)
	}
	if _, err := readCPU(b.pid); err != nil {
		t.Fatalf("broker CPU: %v", err)
	}
}
