package bridge

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a slog handler and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestRefusalLogOnePerBurst: 89 refusals in a burst make one log line at
// once (refused=1) and one closing line with the other 88 when the spool
// keeps a message again; a later burst logs again.
func TestRefusalLogOnePerBurst(t *testing.T) {
	var buf syncBuffer
	r := refusalLog{log: slog.New(slog.NewTextHandler(&buf, nil)), every: time.Hour}
	err := errors.New("no space left on device")
	for range 89 {
		r.refused("sensors/t1", err)
	}
	if got := buf.lines("local messages refused"); len(got) != 1 || !strings.Contains(got[0], "refused=1 ") {
		t.Fatalf("during the burst: %q; want one line, refused=1", got)
	}
	for range 100 {
		r.kept()
	}
	got := buf.lines("local messages refused")
	if len(got) != 2 || !strings.Contains(got[1], "refused=88 ") {
		t.Fatalf("after the burst: %q; want a second line with refused=88", got)
	}
	if n := len(buf.lines("keeps local messages again")); n != 1 {
		t.Fatalf("%d recovery lines; want 1", n)
	}
	r.refused("sensors/t1", err)
	if n := len(buf.lines("local messages refused")); n != 3 {
		t.Fatalf("a new burst logged %d lines in all; want 3", n)
	}
}

// TestPermanentRefusalsListed: PermanentRefusals lists exactly the codes
// permanentRefusal drops for, so /metrics shows every drop reason.
func TestPermanentRefusalsListed(t *testing.T) {
	listed := make(map[byte]bool)
	for _, rc := range PermanentRefusals() {
		listed[rc] = true
	}
	for rc := range 256 {
		if permanentRefusal(byte(rc)) != listed[byte(rc)] {
			t.Errorf("code 0x%02x: permanentRefusal %v, listed %v", rc, permanentRefusal(byte(rc)), listed[byte(rc)])
		}
	}
}
