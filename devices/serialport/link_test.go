package serialport

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// runLink starts l.Run on a goroutine owned by the test and returns a
// function that cancels it and waits for Run to return.
func runLink(t *testing.T, l *Link, h HandleFunc) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A device path that appears later, vanishes, and a cancel: the whole life
// of a USB sensor, with a pty standing in for the device.
func TestLinkLifecycle(t *testing.T) {
	var logs testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	path := filepath.Join(t.TempDir(), "ttySENSOR")
	l := NewLink(LinkConfig{
		Port:       Config{Path: path},
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 40 * time.Millisecond,
	}, log)
	if l.State() != StateStopped {
		t.Fatalf("initial state %v", l.State())
	}

	handled := make(chan error, 4)
	stop := runLink(t, l, func(ctx context.Context, port io.ReadWriteCloser) error {
		if _, err := port.Write([]byte("hi")); err != nil {
			return err
		}
		// Until the device vanishes (io.EOF on hangup) or ctx ends.
		var err error
		for err == nil {
			_, err = port.Read(make([]byte, 64))
		}
		handled <- err
		return err
	})

	// Missing at start: waiting, with failed attempts, logged once.
	testutil.Eventually(t, 10*time.Second, "state waiting", func() bool { return l.State() == StateWaiting && l.Stats().Failures >= 3 })

	// The device appears.
	master, slave, closeSlave := newPty(t)
	if err := os.Symlink(slave, path); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "state open", func() bool { return l.State() == StateOpen })
	if got := readN(t, master, 2); string(got) != "hi" {
		t.Fatalf("master read %q", got)
	}
	if s := l.Stats(); s.Opens != 1 {
		t.Fatalf("stats %+v", s)
	}

	// The device vanishes: the handler returns with an error, the link
	// waits and retries.
	failuresBefore := l.Stats().Failures
	closeSlave()
	master.Close()
	select {
	case err := <-handled:
		if err == nil {
			t.Fatal("handler saw no error when the device vanished")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not return when the device vanished")
	}
	testutil.Eventually(t, 10*time.Second, "reopen attempts", func() bool {
		s := l.Stats()
		return s.Lost == 1 && s.Failures >= failuresBefore+3 && l.State() != StateOpen
	})

	if err := stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if l.State() != StateStopped {
		t.Fatalf("state after Run: %v", l.State())
	}
	out := logs.String()
	for msg, want := range map[string]int{"device unavailable": 1, "device open": 1, "device lost": 1} {
		if n := strings.Count(out, "msg=\""+msg+"\""); n != want {
			t.Errorf("%q logged %d times, want %d:\n%s", msg, n, want, out)
		}
	}
	if !strings.Contains(out, "device="+path) {
		t.Errorf("logs lack the device key:\n%s", out)
	}
}

// Cancelling while the handler is blocked in Read closes the port and Run
// returns promptly.
func TestLinkCancelWhileOpen(t *testing.T) {
	_, slave, _ := newPty(t)
	l := NewLink(LinkConfig{Port: Config{Path: slave}}, nil)
	inRead := make(chan struct{})
	var once sync.Once
	stop := runLink(t, l, func(ctx context.Context, port io.ReadWriteCloser) error {
		once.Do(func() { close(inRead) })
		_, err := port.Read(make([]byte, 1))
		return err
	})
	<-inRead
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Opens != 1 || s.Lost != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The retry delay doubles up to the cap, with jitter in [d/2, d].
func TestLinkBackoff(t *testing.T) {
	var mu sync.Mutex
	var attempts []time.Time
	const minB, maxB = 10 * time.Millisecond, 80 * time.Millisecond
	l := NewLink(LinkConfig{
		Port:       Config{Path: "/dev/null-sensor"},
		MinBackoff: minB,
		MaxBackoff: maxB,
		Open: func(Config) (io.ReadWriteCloser, error) {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, time.Now())
			return nil, os.ErrNotExist
		},
	}, nil)
	stop := runLink(t, l, func(context.Context, io.ReadWriteCloser) error { return nil })
	testutil.Eventually(t, 10*time.Second, "8 attempts", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) >= 8 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	want := minB
	for i := 1; i < 8; i++ {
		gap := attempts[i].Sub(attempts[i-1])
		if gap < want/2 {
			t.Errorf("attempt %d after %v, want >= %v", i, gap, want/2)
		}
		want = min(2*want, maxB)
	}
	if s := l.Stats(); s.Failures < 8 || s.Opens != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLinkHandlerReturnsNil(t *testing.T) {
	_, slave, _ := newPty(t)
	l := NewLink(LinkConfig{Port: Config{Path: slave}, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}, nil)
	stop := runLink(t, l, func(context.Context, io.ReadWriteCloser) error { return nil })
	testutil.Eventually(t, 10*time.Second, "reopened", func() bool { return l.Stats().Opens >= 3 })
	stop()
	if l.Stats().Lost < 2 {
		t.Fatalf("stats %+v", l.Stats())
	}
}

func TestLinkNilHandler(t *testing.T) {
	if err := NewLink(LinkConfig{}, nil).Run(context.Background(), nil); err == nil {
		t.Fatal("nil handler accepted")
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{StateStopped: "stopped", StateOpening: "opening", StateOpen: "open", StateWaiting: "waiting", 9: "State(9)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q", s, s.String())
		}
	}
}
