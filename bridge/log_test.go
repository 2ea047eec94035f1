package bridge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/internal/testutil"
)

// logCounter is a slog.Handler that keeps every record's level, message
// and attributes.
type logCounter struct {
	mu    *sync.Mutex
	recs  *[]logRec
	attrs []slog.Attr
}

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newLogCounter() *logCounter { return &logCounter{mu: new(sync.Mutex), recs: new([]logRec)} }

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCounter{mu: h.mu, recs: h.recs, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: make(map[string]string)}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

// count returns the records at level or above that match.
func (h *logCounter) count(min slog.Level, match func(logRec) bool) (n int, lines []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.recs {
		if r.level >= min && match(r) {
			n++
			lines = append(lines, fmt.Sprintf("%s %s %v", r.level, r.msg, r.attrs))
		}
	}
	return n, lines
}

func (h *logCounter) dump() string {
	_, lines := h.count(slog.LevelDebug-8, func(logRec) bool { return true })
	return strings.Join(lines, "\n")
}

// runLoggedBridge runs a bridge whose lines go to h.
func runLoggedBridge(t *testing.T, cfg bridge.Config, gw bridge.Gateway, h *logCounter) *running {
	t.Helper()
	log := slog.New(h)
	b, err := bridge.New(cfg, gw, log)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{Bridge: b}
	r.start(t)
	return r
}

// TestConnectFailureLogs (issue 15, point 3): with a real mosquitto, a
// failure that retrying cannot heal (an upstream certificate from an
// unknown CA, a CONNECT refused as not authorised) is one ERROR line with
// a hint however often it repeats; an outage is one WARN (disconnected)
// and one INFO (connect failed) line however many attempts fail, and one
// INFO line when it heals. Every attempt is counted in ConnectFailures.
func TestConnectFailureLogs(t *testing.T) {
	dir := tlsDir(t)
	ca := newTestCA(t, dir, "cloud-ca")
	srvCert, srvKey := ca.issue(t, dir, "broker", true)
	otherCA := newTestCA(t, dir, "other-ca")
	tlsPort, closedPort := freePort(t), freePort(t)
	startMosquittoConf(t, fmt.Sprintf("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n"+
		"listener %d 127.0.0.1\nallow_anonymous false\n", tlsPort, ca.file, srvCert, srvKey, closedPort), tlsPort, closedPort)

	permanent := []struct {
		name, addr, hint string
		tls              bridge.TLSConfig
	}{
		{"unknown CA", "tls://127.0.0.1:" + strconv.Itoa(tlsPort), "tls.ca", bridge.TLSConfig{CA: otherCA.file}},
		{"not authorised", "tcp://127.0.0.1:" + strconv.Itoa(closedPort), "does not authorise", bridge.TLSConfig{}},
	}
	for _, tc := range permanent {
		t.Run(tc.name, func(t *testing.T) {
			h := newLogCounter()
			cfg := testConfig(t, "cloud", tc.addr)
			cfg.TLS = tc.tls
			b := runLoggedBridge(t, cfg, startGateway(t).srv, h)
			testutil.Eventually(t, 10*time.Second, "5 failed attempts", func() bool { return b.Stats().ConnectFailures >= 5 })
			b.stop(t)
			n, lines := h.count(slog.LevelError, func(r logRec) bool {
				return r.msg == "uplink connect failed" && strings.Contains(r.attrs["hint"], tc.hint)
			})
			if n != 1 {
				t.Errorf("%d ERROR lines with a hint naming %q for %d attempts, want 1:\n%s", n, tc.hint, b.Stats().ConnectFailures, strings.Join(lines, "\n"))
			}
			if t.Failed() {
				t.Logf("log:\n%s", h.dump())
			}
		})
	}

	t.Run("outage", func(t *testing.T) {
		h := newLogCounter()
		plain := startMosquitto(t)
		b := runLoggedBridge(t, testConfig(t, "cloud", plain.url()), startGateway(t).srv, h)
		b.waitState(t, bridge.Connected)
		plain.Kill()
		testutil.Eventually(t, 10*time.Second, "10 failed attempts", func() bool { return b.Stats().ConnectFailures >= 10 })
		plain.Start()
		b.waitState(t, bridge.Connected)
		testutil.Eventually(t, 5*time.Second, "the healed line", func() bool {
			n, _ := h.count(slog.LevelInfo, func(r logRec) bool { return r.msg == "uplink connected" })
			return n == 2
		})
		// Counted before the stop, whose own lines are not the outage's.
		atLeast := func(min slog.Level) map[string]int {
			m := make(map[string]int)
			h.count(min, func(r logRec) bool { m[r.msg]++; return true })
			return m
		}
		got := atLeast(slog.LevelInfo)
		t.Logf("outage with %d failed attempts: lines at INFO and above: %v", b.Stats().ConnectFailures, got)
		want := map[string]int{"uplink connected": 2, "uplink disconnected": 1, "uplink connect failed": 1,
			"uplink connect succeeded after failing": 1}
		for msg, n := range want {
			if got[msg] != n {
				t.Errorf("%q: %d lines, want %d", msg, got[msg], n)
			}
		}
		if n, _ := h.count(slog.LevelWarn, func(r logRec) bool { return r.msg == "uplink disconnected" }); n != 1 {
			t.Errorf("uplink disconnected: %d WARN lines, want 1", n)
		}
		if t.Failed() {
			t.Logf("log:\n%s", h.dump())
		}
		b.stop(t)
	})
}

// tlsDir is a directory mosquitto can read after dropping root (test
// keys only).
func tlsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgegw-bridge-tls-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPermanentHint: the errors retrying cannot heal get a hint, as the
// uplink wraps them (a CONNACK's refusal as connackErr names it, over
// either version); network errors do not. (A client certificate refused
// by the upstream arrives as a TLS alert, or, racing it, as a reset:
// only the alert can be classified.)
func TestPermanentHint(t *testing.T) {
	wrap := func(err error) error { // dialTransport's shape
		return fmt.Errorf("connect tls://h: %w", fmt.Errorf("dial tls://h: %w", err))
	}
	connack := func(code byte, v5 bool) error {
		return fmt.Errorf("connect tcp://h: %w", bridge.ConnackErr(&session.ConnackError{Code: code}, v5))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(&net.OpError{Op: "remote error", Err: tls.AlertError(116)}), "client certificate"},
		{wrap(&net.OpError{Op: "remote error", Err: tls.AlertError(48)}), "client certificate"},
		{connack(4, false), "username/password"},
		{connack(0x86, true), "username/password"},
		{connack(5, false), "does not authorise"},
		{connack(0x87, true), "does not authorise"},
		{connack(2, false), "client_id"},
		{connack(0x85, true), "client_id"},
		{wrap(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), "tls.server_name"},
		{wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), "does not speak TLS"},
		{wrap(context.DeadlineExceeded), ""},
		{wrap(syscall.ECONNREFUSED), ""},
		{wrap(syscall.ECONNRESET), ""},
		{connack(3, false), ""},    // server unavailable: it may come back
		{connack(0x88, true), ""},  // server unavailable
		{connack(0x87, false), ""}, // not a 3.1.1 code
	} {
		if got := bridge.PermanentHint(tc.err); !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%v: hint %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestFailLogRateLimit drives the connect failure log's clock: a failure
// repeated for 19 s (an outage) is one line; one lasting past 5 minutes
// gets a summary at WARN with the attempts; another kind of failure is a
// line at once; a success closes the streak with one line.
func TestFailLogRateLimit(t *testing.T) {
	h := newLogCounter()
	log := slog.New(h)
	var fl bridge.FailLog
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	for ; now.Sub(t0) < 19*time.Second; now = now.Add(100 * time.Millisecond) {
		fl.Failed(log, "tcp://cloud:1883", refused, now)
	}
	lines := func(level slog.Level, msg string) int {
		n, _ := h.count(level, func(r logRec) bool { return r.level == level && r.msg == msg })
		return n
	}
	if n := lines(slog.LevelInfo, "uplink connect failed"); n != 1 {
		t.Fatalf("19 s of refused connects: %d lines, want 1:\n%s", n, h.dump())
	}
	for ; now.Sub(t0) < 5*time.Minute+time.Second; now = now.Add(time.Second) {
		fl.Failed(log, "tcp://cloud:1883", refused, now)
	}
	if n := lines(slog.LevelWarn, "uplink connect still failing"); n != 1 {
		t.Fatalf("after 5 min: %d summaries, want 1:\n%s", n, h.dump())
	}
	fl.Failed(log, "tcp://cloud:1883", fmt.Errorf("connect: %w", bridge.ConnackErr(&session.ConnackError{Code: 5}, false)), now)
	if n := lines(slog.LevelError, "uplink connect failed"); n != 1 {
		t.Fatalf("a new, permanent failure: %d ERROR lines, want 1:\n%s", n, h.dump())
	}
	fl.Connected(log, now.Add(time.Second))
	if n := lines(slog.LevelInfo, "uplink connect succeeded after failing"); n != 0 {
		t.Fatalf("a streak of one failure needs no closing line:\n%s", h.dump())
	}
	fl.Failed(log, "tcp://cloud:1883", refused, now)
	fl.Failed(log, "tcp://cloud:1883", refused, now)
	fl.Connected(log, now.Add(time.Second))
	if n := lines(slog.LevelInfo, "uplink connect succeeded after failing"); n != 1 {
		t.Fatalf("%d closing lines, want 1:\n%s", n, h.dump())
	}
}
