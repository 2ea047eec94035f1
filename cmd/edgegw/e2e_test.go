package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// freePort returns a 127.0.0.1 address nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 here): a port the
	// tests give up and take again (a cloud broker restarted) is never
	// handed meanwhile to another process's bind(":0") or outgoing
	// connection. Seen in full-suite runs: a restarted mosquitto could not
	// bind, something else answered on its port, and the bridge delivered
	// its backlog there.
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	t.Fatal("no free port in 20000-32000")
	return ""
}

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

// TestBinaryWithMosquittoClients runs the real binary with a config and
// talks to it with mosquitto_sub/mosquitto_pub, then checks /metrics,
// /healthz, SIGHUP reload and a clean SIGTERM stop.
func TestBinaryWithMosquittoClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs mosquitto-clients): %v", tool, err)
		}
	}
	bin := buildEdgegw(t)
	addr, maddr := freePort(t), freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
log: {level: info}
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
`, addr, maddr)), 0o600)
	g := startEdgegw(t, bin, "--config", cfg)
	waitListening(t, addr)

	for _, v := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sub := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-V", v, "-t", "#", "-v", "-C", "1", "-W", "15", "-q", "2")
			got := publishUntilPrinted(t, sub, func() *exec.Cmd {
				return exec.CommandContext(ctx, "mosquitto_pub", "-h", host, "-p", port, "-V", v, "-t", "a/b", "-m", "hi", "-q", "2")
			}, 15*time.Second)
			if strings.TrimSpace(got) != "a/b hi" {
				t.Fatalf("mosquitto_sub printed %q", got)
			}
		})
	}

	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "edgegw_messages_received_total") {
		t.Fatalf("/metrics lacks edgegw counters:\n%.500s", body)
	}
	resp, err = http.Get("http://" + maddr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", err, resp)
	}
	resp.Body.Close()

	// SIGHUP with a changed log level reloads without dropping the listener.
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
log: {level: debug}
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
`, addr, maddr)), 0o600)
	g.cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "reload logged", func() bool { return strings.Contains(g.logs(), "log_level=debug") })

	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		g.done <- err // for cleanup
		if err != nil {
			t.Fatalf("edgegw exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("edgegw did not stop on SIGTERM")
	}
}

func TestPasswdCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "passwd")
	r, w, _ := os.Pipe()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	w.WriteString("s3cret\n")
	w.Close()
	code, out, errOut := call(t, "passwd", file, "alice")
	if code != 0 {
		t.Fatalf("passwd exit %d: %s %s", code, out, errOut)
	}
	b, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(b), "alice:$2") {
		t.Fatalf("password file = %q", b)
	}
	if code, _, _ := call(t, "passwd", file); code != exitUsage {
		t.Fatalf("passwd with one arg exit %d, want %d", code, exitUsage)
	}

	// Changing a password keeps the file's owner, group and mode (the
	// admin made it readable by the gateway's group). Needs root to chown.
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (make test does) to chown the password file")
	}
	if err := os.Chown(file, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o604); err != nil {
		t.Fatal(err)
	}
	r2, w2, _ := os.Pipe()
	os.Stdin = r2
	w2.WriteString("n3w\n")
	w2.Close()
	if code, out, errOut := call(t, "passwd", file, "bob"); code != 0 {
		t.Fatalf("passwd bob exit %d: %s %s", code, out, errOut)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 4242 || sys.Gid != 4343 || st.Mode().Perm() != 0o604 {
		t.Errorf("after passwd: uid %d gid %d mode %o, want 4242 4343 604", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), "alice:$2") || !strings.Contains(string(b), "bob:$2") {
		t.Errorf("password file = %q", b)
	}
}

// publishUntilPrinted starts sub (a mosquitto_sub that prints one message
// and exits) and runs pub every 300 ms until sub has printed, whose
// SUBSCRIBE cannot be seen from here; it returns what sub printed.
func publishUntilPrinted(t *testing.T, sub *exec.Cmd, pub func() *exec.Cmd, within time.Duration) string {
	t.Helper()
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(out)
		lines <- string(b)
	}()
	deadline := time.After(within)
	for {
		p := pub()
		if b, err := p.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", p.Args, err, b)
		}
		select {
		case got := <-lines:
			sub.Wait()
			return got
		case <-time.After(300 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%v printed nothing within %s", sub.Args, within)
		}
	}
}
