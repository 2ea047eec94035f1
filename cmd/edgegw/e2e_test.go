package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// waitListening waits (at most 10 s) until addr accepts a TCP connection.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "listener on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// gatewayProc is the real edgegw binary running as a child process.
type gatewayProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  strings.Builder
	done chan error
}

func (g *gatewayProc) logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

func buildEdgegw(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgegw")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func startEdgegw(t *testing.T, bin string, args ...string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.mu.Lock()
			g.log.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
		}
		g.done <- g.cmd.Wait()
	}()
	t.Cleanup(func() {
		g.cmd.Process.Kill()
		<-g.done
		if t.Failed() {
			t.Logf("edgegw log:\n%s", g.logs())
		}
	})
	return g
}

// startMosquitto runs Debian's mosquitto as the cloud broker on addr with
// its persistence in dir, so a persistent subscriber's session survives a
// restart of the cloud broker (Stop saves it; a later startMosquitto on the
// same dir loads it).
func startMosquitto(t *testing.T, addr, dir string) *testutil.Mosquitto {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("mosquitto address %q: %v", addr, err)
	}
	conf := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n", port, dir)
	return testutil.StartMosquitto(t, conf, p)
}

// subscribeUpstream runs mosquitto_sub on the upstream until it has n
// messages and returns its output lines.
func subscribeUpstream(ctx context.Context, t *testing.T, addr, topic string, n int) <-chan []string {
	host, port, _ := net.SplitHostPort(addr)
	out := make(chan []string, 1)
	cmd := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-t", topic, "-v", "-q", "1",
		"-C", fmt.Sprint(n), "-i", "cloud-reader", "-c") // persistent: nothing is missed while we reconnect
	go func() {
		b, _ := cmd.Output()
		out <- strings.Split(strings.TrimSpace(string(b)), "\n")
	}()
	return out
}
