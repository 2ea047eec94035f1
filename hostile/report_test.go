package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	text := "Name:\tedgegw\nVmPeak:\t  800000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n"
	m, err := parseStatus([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 10240*1024 || m.HWM != 20480*1024 {
		t.Fatalf("got %+v, want RSS 10 MiB, HWM 20 MiB", m)
	}
	if _, err := parseStatus([]byte("Name:\tx\nVmRSS:\t1 kB\n")); err == nil {
		t.Fatal("a status without VmHWM parsed")
	}
	// The real file of this process.
	self, err := readMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.RSS <= 0 || self.HWM < self.RSS {
		t.Fatalf("own memory %+v: want 0 < RSS <= HWM", self)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	line := "4242 (evil) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 7 0 100 0 0\n"
	ticks, err := parseStatCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if ticks != 325 {
		t.Fatalf("utime+stime = %d, want 325", ticks)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("a short stat line parsed")
	}
	// The real file: burning CPU must show, within a deadline.
	c0, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		c1, err := readCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if c1 > c0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stuck at %.2f s after 10 s of work (%d)", c0, x)
		}
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var s []sample
	// 100 before the attack at 1 ms; 100 during: 98 at 2 ms, one at 9 ms, one lost.
	for i := 0; i < 100; i++ {
		s = append(s, sample{sent: t0.Add(time.Duration(i-100) * 10 * time.Millisecond), rtt: time.Millisecond, got: true})
	}
	for i := 0; i < 100; i++ {
		sm := sample{sent: t0.Add(time.Duration(i) * 10 * time.Millisecond), rtt: 2 * time.Millisecond, got: true}
		switch i {
		case 50:
			sm.rtt = 9 * time.Millisecond
		case 70:
			sm.got = false
		}
		s = append(s, sm)
	}
	before := summarize(s, t0.Add(-time.Second), t0)
	if before.N != 100 || before.Lost != 0 || before.P99 != time.Millisecond {
		t.Fatalf("before = %+v", before)
	}
	during := summarize(s, t0, t0.Add(time.Second))
	// Nearest rank 99 of 100: the 9 ms sample; the lost one (lostRTT) is the 100th.
	if during.N != 100 || during.Lost != 1 || during.P99 != 9*time.Millisecond {
		t.Fatalf("during = %+v", during)
	}
	if w := summarize(s, t0.Add(time.Hour), t0.Add(2*time.Hour)); w.N != 0 || w.P99 != 0 {
		t.Fatalf("empty window = %+v", w)
	}
	if q := quantile([]time.Duration{3, 1, 2}, 0.5); q != 2 {
		t.Fatalf("median of 1,2,3 = %v", q)
	}
}

func TestVarint(t *testing.T) {
	for n, want := range map[int][]byte{0: {0}, 127: {0x7f}, 128: {0x80, 1}, 1048560: {0xf0, 0xff, 0x3f}, 268435455: {0xff, 0xff, 0xff, 0x7f}} {
		if got := varint(n); !bytes.Equal(got, want) {
			t.Errorf("varint(%d) = %x, want %x", n, got, want)
		}
	}
}

func result(attack, broker string, before, during float64, rssBefore, rssPeak int64, cpu float64, leaks ...string) Result {
	r := Result{Attack: attack, Broker: broker, Survived: true, P99BeforeUs: before, P99DuringUs: during, RSSBefore: rssBefore, RSSPeak: rssPeak, CPUSeconds: cpu}
	r.LeakChecked = attack == "acl-leaks"
	r.Leaks = leaks
	return r
}

func TestTargetsAndReport(t *testing.T) {
	const MiB = 1 << 20
	results := []Result{
		result("deep-filters", "edgegw", 1000, 2000, 9*MiB, 20*MiB, 0.1),
		result("deep-filters", "mosquitto", 1000, 1000, 9*MiB, 9*MiB, 0.1),
		result("wrong-password", "edgegw", 1000, 5000, 9*MiB, 9*MiB, 1),
		result("wrong-password", "mosquitto", 1000, 4000, 9*MiB, 9*MiB, 1),
		result("length-claims", "edgegw", 1000, 1000, 9*MiB, 9*MiB, 0.3),
		result("acl-leaks", "edgegw", 1000, 1000, 9*MiB, 9*MiB, 0.1, "alice received shared/secret/x"),
		result("acl-leaks", "mosquitto", 1000, 1000, 9*MiB, 9*MiB, 0.1),
	}
	results[1].Survived = false
	got := map[string]target{}
	for _, tg := range targets(results) {
		got[tg.Name[:8]] = tg
	}
	for prefix, wantMet := range map[string]bool{"nothing ": false, "one clie": true, "wrong-pa": false, "near-lim": true} {
		tg, ok := got[prefix]
		if !ok || !tg.Known || tg.Met != wantMet {
			t.Errorf("target %q = %+v, want known, met=%v", prefix, tg, wantMet)
		}
	}
	if tg := got["one clie"]; tg.Value != "11.0 MiB" {
		t.Errorf("deep filters value %q, want 11.0 MiB", tg.Value)
	}
	if tg := targets(results[:1])[2]; tg.Known {
		t.Errorf("wrong-password target known without results: %+v", tg)
	}

	ws := strings.Join(worse(results), "\n")
	if !strings.Contains(ws, "acl-leaks: edgegw leaked 1, mosquitto 0") || strings.Contains(ws, "deep-filters") {
		t.Errorf("worse() = %q", ws)
	}

	var b bytes.Buffer
	writeReport(&b, "title", results)
	md := b.String()
	for _, want := range []string{
		"| deep-filters | edgegw | yes | 9.0 → 20.0 → 0.0 | 0.10 | 1.0 → 2.0 | 2.0 | – |",
		"| deep-filters | mosquitto | **no** |",
		"| acl-leaks | edgegw | yes |",
		"| **yes** (1) |",
		"- edgegw, acl-leaks: alice received shared/secret/x",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
