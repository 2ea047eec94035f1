package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestFloorRelaysAndBridges checks that both designs do what the sensors
// scenarios measure: a QoS 1 PUBLISH reaches the local subscriber and the
// upstream (Debian's mosquitto) and its publisher gets a PUBACK. A floor
// that did less would measure too little.
func TestFloorRelaysAndBridges(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gofloor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, mode := range []string{"goroutines", "epoll"} {
		t.Run(mode, func(t *testing.T) {
			upPort := testutil.FreePort(t)
			testutil.StartMosquitto(t, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", upPort), upPort)
			up := fmt.Sprintf("127.0.0.1:%d", upPort)
			addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
			args := []string{"-addr", addr, "-upstream", up}
			if mode == "epoll" {
				args = append(args, "-epoll")
			}
			cmd := exec.Command(bin, args...)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

			local, upstream := subscribe(t, addr, "local"), subscribe(t, up, "upstream")
			pub := connect(t, addr, "pub")
			const n = 5
			for i := range n {
				tok := pub.Publish("sensors/1/temperature", 1, false, fmt.Sprintf("reading %d", i))
				if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("publish %d: no PUBACK (%v)", i, tok.Error())
				}
			}
			for name, got := range map[string]*received{"local": local, "upstream": upstream} {
				testutil.Eventually(t, 10*time.Second, name+" subscriber has every reading", func() bool { return got.count() == n })
			}
		})
	}
}

type received struct {
	mu sync.Mutex
	n  int
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func connect(t *testing.T, addr, id string) mqtt.Client {
	t.Helper()
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("gofloor-test-" + id).SetAutoReconnect(false)
	var c mqtt.Client
	testutil.Eventually(t, 10*time.Second, "connected to "+addr, func() bool {
		c = mqtt.NewClient(opts)
		tok := c.Connect()
		return tok.WaitTimeout(2*time.Second) && tok.Error() == nil
	})
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func subscribe(t *testing.T, addr, id string) *received {
	t.Helper()
	c, got := connect(t, addr, id), &received{}
	tok := c.Subscribe("sensors/#", 1, func(mqtt.Client, mqtt.Message) {
		got.mu.Lock()
		got.n++
		got.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe on %s: %v", addr, tok.Error())
	}
	return got
}
