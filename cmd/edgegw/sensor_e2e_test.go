package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// ptyWire is two pseudo-terminals whose masters are copied into each other:
// a null-modem cable between two slave paths.
func ptyWire(t *testing.T) (a, b string) {
	t.Helper()
	ma, sa := pollablePty(t)
	mb, sb := pollablePty(t)
	for _, s := range []*os.File{sa, sb} { // raw: no echo, no line discipline
		if _, err := exec.Command("stty", "-F", s.Name(), "raw", "-echo").CombinedOutput(); err != nil {
			t.Fatalf("stty raw %s: %v", s.Name(), err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(mb, ma) }() // ends when the masters close
	go func() { defer wg.Done(); io.Copy(ma, mb) }()
	t.Cleanup(func() {
		ma.Close()
		mb.Close()
		wg.Wait()
		sa.Close() // held open so the masters never read EIO between opens
		sb.Close()
	})
	return sa.Name(), sb.Name()
}

// pollablePty opens a pty whose master is in non-blocking mode, so that
// closing it ends a Read blocked on it (a blocking pty fd is not in Go's
// poller, and Close would leave the copier stuck).
func pollablePty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, s, err := pty.Open()
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	fd, err := syscall.Dup(int(m.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "ptmx"), s
}

// TestSensorSubcommand: `edgegw sensor` of the real binary publishes its
// readings through the gateway's serial listener (issue 15, point 5: the
// simulator ships in the binary the .deb installs).
func TestSensorSubcommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	gwTTY, sensorTTY := ptyWire(t)
	addr := freePort(t)
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
  - {name: uart, type: serial, device: "%s"}
metrics: {address: ""}
`, addr, gwTTY)), 0o600)
	g := startEdgegw(t, bin, "--config", cfg)
	waitListening(t, addr)
	testutil.Eventually(t, 10*time.Second, "serial link open", func() bool { return strings.Contains(g.logs(), gwTTY) })

	got := make(chan string, 10)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("watch"))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer sub.Disconnect(50)
	if tok := sub.Subscribe("sensors/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		got <- m.Topic() + " " + string(m.Payload())
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "sensor", "--device", sensorTTY, "--id", "s7",
		"--count", "3", "--rate", "20/s", "--qos", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("edgegw sensor: %v\n%s", err, out)
	}
	for i := 1; i <= 3; i++ {
		select {
		case m := <-got:
			if !strings.HasPrefix(m, "sensors/s7/temp ") || !strings.Contains(m, fmt.Sprintf(`"seq":%d`, i)) {
				t.Fatalf("reading %d: %q", i, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %d did not arrive; sensor output:\n%s", i, out)
		}
	}
}
