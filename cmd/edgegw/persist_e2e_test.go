package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// persistEnv is the real binary with persistence.dir, driven by
// mosquitto_pub/mosquitto_sub.
type persistEnv struct {
	t             *testing.T
	bin, cfg, dir string
	addr, maddr   string
	host, port    string
	g             *gatewayProc
}

func newPersistEnv(t *testing.T, bin, sync string) *persistEnv {
	e := &persistEnv{t: t, bin: bin, dir: t.TempDir(), addr: freePort(t), maddr: freePort(t)}
	e.host, e.port, _ = net.SplitHostPort(e.addr)
	e.cfg = filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(e.cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: "%s", sync: %s, sync_interval: 20ms}
`, e.addr, e.maddr, e.dir, sync)), 0o600)
	return e
}

func (e *persistEnv) start() {
	e.g = startEdgegw(e.t, e.bin, "--config", e.cfg)
	testutil.Eventually(e.t, 10*time.Second, "edgegw listening", func() bool {
		c, err := net.Dial("tcp", e.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// stop ends the process with sig and waits for it.
func (e *persistEnv) stop(sig syscall.Signal) {
	e.g.cmd.Process.Signal(sig)
	select {
	case err := <-e.g.done:
		e.g.done <- err
		if sig == syscall.SIGTERM && err != nil {
			e.t.Fatalf("edgegw exited with %v after SIGTERM\n%s", err, e.g.logs())
		}
	case <-time.After(15 * time.Second):
		e.t.Fatalf("edgegw did not stop on %v", sig)
	}
}

func (e *persistEnv) run(name string, args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, append([]string{"-h", e.host, "-p", e.port}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// stateBytes is everything under persistence.dir/state, concatenated.
func (e *persistEnv) stateBytes() []byte {
	var all []byte
	filepath.Walk(filepath.Join(e.dir, "state"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			all = append(all, b...)
		}
		return nil
	})
	return all
}

func (e *persistEnv) metric(name string) string {
	resp, err := http.Get("http://" + e.maddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimPrefix(l, name+" ")
		}
	}
	return ""
}

// retainedNow subscribes with a real paho client to filter and returns
// the retained messages it gets: everything before a marker it publishes
// after its SUBACK (retained messages are queued before SUBACK returns).
func (e *persistEnv) retainedNow(filter string) map[string]string {
	e.t.Helper()
	got := make(chan [2]string, 100)
	o := mqtt.NewClientOptions().AddBroker("tcp://" + e.addr).SetClientID("retained-check").SetCleanSession(true)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		e.t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	tok := c.SubscribeMultiple(map[string]byte{filter: 1, "marker/end": 1}, func(_ mqtt.Client, m mqtt.Message) {
		got <- [2]string{m.Topic(), string(m.Payload())}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		e.t.Fatalf("subscribe: %v", tok.Error())
	}
	if tok := c.Publish("marker/end", 1, false, "end"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		e.t.Fatalf("publish marker: %v", tok.Error())
	}
	out := map[string]string{}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-got:
			if m[0] == "marker/end" {
				return out
			}
			out[m[0]] = m[1]
		case <-deadline:
			e.t.Fatalf("marker never arrived; got %v", out)
		}
	}
}

// TestBinaryStateSurvivesRestart: with persistence.dir, a persistent
// subscriber's 10 queued QoS 1 messages, a retained message and a cleared
// retained message survive SIGTERM and kill -9 in every sync mode; a clean
// session leaves nothing on disk.
func TestBinaryStateSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	for _, c := range []struct {
		sync string
		sig  syscall.Signal
	}{
		{"batch", syscall.SIGTERM}, {"batch", syscall.SIGKILL},
		{"always", syscall.SIGKILL}, {"none", syscall.SIGKILL},
	} {
		t.Run(c.sync+"/"+c.sig.String(), func(t *testing.T) {
			e := newPersistEnv(t, bin, c.sync)
			e.start()
			// A persistent subscriber (an actuator) registers and goes offline.
			e.run("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-E")
			// A clean session that must leave nothing on disk.
			e.run("mosquitto_sub", "-i", "clean-client", "-q", "1", "-t", "secret/#", "-E")
			for i := range 10 {
				e.run("mosquitto_pub", "-q", "1", "-t", "cmd/valve", "-m", fmt.Sprintf("open-%d", i))
			}
			e.run("mosquitto_pub", "-q", "1", "-r", "-t", "keep/r", "-m", "kept")
			e.run("mosquitto_pub", "-q", "1", "-r", "-t", "gone/r", "-m", "soon-cleared")
			e.run("mosquitto_pub", "-q", "1", "-r", "-t", "gone/r", "-n")
			e.run("mosquitto_pub", "-q", "1", "-t", "secret/x", "-m", "secret-payload")
			if v := e.metric("edgegw_state_bytes_written_total"); v == "" || v == "0" {
				t.Errorf("edgegw_state_bytes_written_total = %q", v)
			}
			// Every publish above was acknowledged: now stop (or crash).
			e.stop(c.sig)
			for _, w := range []string{"clean-client", "secret"} {
				if bytes.Contains(e.stateBytes(), []byte(w)) {
					t.Errorf("%q found on disk: a clean session must leave nothing", w)
				}
			}

			e.start()
			out := e.run("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-v", "-C", "10", "-W", "20")
			var want []string
			for i := range 10 {
				want = append(want, fmt.Sprintf("cmd/valve open-%d", i))
			}
			if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("persistent subscriber got after restart:\n%s\nwant the 10 queued messages in order", out)
			}
			if got := e.retainedNow("+/r"); len(got) != 1 || got["keep/r"] != "kept" {
				t.Fatalf("retained after restart = %v, want only keep/r=kept (gone/r stays cleared)", got)
			}
		})
	}
}

// TestBinaryExpiredSessionLeavesNothing: a persistent session that expired
// leaves no trace in persistence.dir after a clean stop.
func TestBinaryExpiredSessionLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := newPersistEnv(t, buildEdgegw(t), "batch")
	e.start()
	e.run("mosquitto_sub", "-V", "mqttv5", "-c", "-x", "2", "-i", "short-lived", "-q", "1", "-t", "tmp/short-lived-topic", "-E")
	e.run("mosquitto_pub", "-q", "1", "-t", "tmp/short-lived-topic", "-m", "short-lived-payload")
	// Acknowledged, so on disk while the session lives (this test can fail).
	if !bytes.Contains(e.stateBytes(), []byte("short-lived-payload")) && e.metric("edgegw_sessions_expired_total") == "0" {
		t.Fatal("queued message of a live persistent session not on disk")
	}
	testutil.Eventually(t, 10*time.Second, "session expiry", func() bool { return e.metric("edgegw_sessions_expired_total") == "1" })
	e.stop(syscall.SIGTERM)
	if b := e.stateBytes(); bytes.Contains(b, []byte("short-lived")) || len(b) == 0 {
		t.Fatalf("expired session still on disk (%d bytes)", len(b))
	}
}

// TestBinaryBridgedCommandSurvivesKill9: a command from the cloud (an `in`
// rule) for an offline persistent subscriber (an actuator) is acknowledged
// upstream only once it is kept, so kill -9 of edgegw right after does not
// lose it.
func TestBinaryBridgedCommandSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cloud := freePort(t)
	startMosquitto(t, cloud, t.TempDir())
	chost, cport, _ := net.SplitHostPort(cloud)
	e := newPersistEnv(t, buildEdgegw(t), "batch")
	cfg, _ := os.ReadFile(e.cfg)
	os.WriteFile(e.cfg, append(cfg, fmt.Sprintf(`
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-cmd-test
    reconnect_min: 100ms
    reconnect_max: 500ms
    topics:
      - {pattern: "cmd/#", direction: in, qos: 1}
`, cloud)...), 0o600)
	e.start()
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return strings.Contains(e.g.logs(), "connected") })
	e.run("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-E")
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", chost, "-p", cport, "-q", "1", "-t", "cmd/valve",
			"-m", fmt.Sprint("open-", i)).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("mosquitto_pub upstream: %v %s", err, out)
		}
	}
	// Acknowledged upstream (the bridge counts it after the gateway kept it).
	testutil.Eventually(t, 15*time.Second, "5 commands received", func() bool {
		return e.metric(`edgegw_bridge_received_total{bridge="cloud"}`) == "5"
	})
	e.stop(syscall.SIGKILL)
	e.start()
	out := e.run("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-C", "5", "-W", "20")
	if got := strings.Fields(out); strings.Join(got, ",") != "open-0,open-1,open-2,open-3,open-4" {
		t.Fatalf("actuator got %q after kill -9", out)
	}
}

// TestBinaryDamagedStateStillStarts: a damaged state file never keeps the
// broker from starting: readable records are kept, the file is moved
// aside and the damage is logged at ERROR; a state directory that cannot
// be used at all leaves the broker running with its state in memory.
func TestBinaryDamagedStateStillStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	t.Run("flipped byte", func(t *testing.T) {
		e := newPersistEnv(t, bin, "batch")
		e.start()
		e.run("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "first")
		e.run("mosquitto_pub", "-q", "1", "-r", "-t", "keep/b", "-m", "second")
		e.stop(syscall.SIGKILL)
		path := filepath.Join(e.dir, "state", "state.log")
		b, err := os.ReadFile(path)
		i := bytes.Index(b, []byte("first"))
		if err != nil || i < 0 {
			t.Fatalf("state file: %v, %d bytes", err, len(b))
		}
		b[i] ^= 0xff // damage the keep/a record only
		os.WriteFile(path, b, 0o600)
		e.start()
		if got := e.retainedNow("keep/+"); len(got) != 1 || got["keep/b"] != "second" {
			t.Fatalf("retained after damage = %v, want keep/b only (the damaged record lost)", got)
		}
		if !strings.Contains(e.g.logs(), "level=ERROR msg=\"state file damaged") {
			t.Fatalf("damage not logged at ERROR:\n%s", e.g.logs())
		}
		if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) != 1 {
			t.Fatalf("damaged file not kept aside: %v", m)
		}
	})
	t.Run("unusable dir", func(t *testing.T) {
		e := newPersistEnv(t, bin, "batch")
		os.WriteFile(filepath.Join(e.dir, "state"), []byte("a file where the state dir should be"), 0o600)
		e.start()
		e.run("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "in memory")
		if got := e.retainedNow("keep/+"); got["keep/a"] != "in memory" {
			t.Fatalf("broker without its state dir: retained %v", got)
		}
		if !strings.Contains(e.g.logs(), "level=ERROR msg=\"broker state cannot be kept on disk") {
			t.Fatalf("unusable state dir not logged at ERROR:\n%s", e.g.logs())
		}
	})
}

// TestBinaryNoPersistenceDir: without persistence.dir nothing survives a
// restart.
func TestBinaryNoPersistenceDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := newPersistEnv(t, buildEdgegw(t), "batch")
	cfg, _ := os.ReadFile(e.cfg)
	os.WriteFile(e.cfg, bytes.ReplaceAll(cfg, []byte("dir: \""+e.dir+"\""), []byte(`dir: ""`)), 0o600)
	e.start()
	e.run("mosquitto_pub", "-q", "1", "-r", "-t", "keep/a", "-m", "x")
	if got := e.retainedNow("keep/+"); len(got) != 1 {
		t.Fatalf("retained before restart: %v", got)
	}
	e.stop(syscall.SIGTERM)
	e.start()
	if got := e.retainedNow("keep/+"); len(got) != 0 {
		t.Fatalf("retained after a restart without persistence.dir: %v", got)
	}
	if entries, _ := os.ReadDir(e.dir); len(entries) != 0 {
		t.Fatalf("files written without persistence.dir: %v", entries)
	}
}
