package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/listeners"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// broker is a gateway.Server on a real 127.0.0.1 TCP listener.
type broker struct {
	srv  *gateway.Server
	addr string
	stop func() // stops the broker and waits for it; idempotent
}

// startBroker runs a broker for the length of the test and stops it (and
// waits for every goroutine) in cleanup.
func startBroker(t testing.TB, opts gateway.Options) *broker {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("EDGEGW_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return startBrokerLog(t, opts, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// startBrokerLog is startBroker with the caller's logger (tests of what is
// logged).
func startBrokerLog(t testing.TB, opts gateway.Options, log *slog.Logger) *broker {
	t.Helper()
	srv := gateway.New(opts, log)
	l := &listeners.TCP{Name: "test", Address: "127.0.0.1:0", Log: log}
	if err := l.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); l.Serve(ctx, srv.ServeConn) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return &broker{srv: srv, addr: l.Addr().String(), stop: stop}
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
