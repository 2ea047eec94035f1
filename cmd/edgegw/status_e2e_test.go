package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/status.golden.json")

// Secrets in the status test's config: none may appear on the page or in
// status.json.
const (
	secretBridgePassword = "s3cret-bridge-pw"
	secretURLPassword    = "s3cret-url-pw"
	secretKeyName        = "s3cret-listener.key"
)

// statusEnv is a running edgegw with a bridge to mosquitto, a serial
// sensor on a pty and MQTT clients, for the status page tests.
type statusEnv struct {
	t                 *testing.T
	dir               string
	local, cloud, web string
	tls               string
	up                *testutil.Mosquitto
	cloudData         string
	g                 *gatewayProc
	serial            *os.File // the sensor's end of the pty
}

// writeSelfSigned writes a throwaway certificate and key for a TLS listener.
func writeSelfSigned(t *testing.T, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edgegw-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// openPty opens a pty whose slave is reachable at link; the returned
// master is non-blocking (Close interrupts a Read), and is drained by a
// goroutine that ends when it is closed.
func openPty(t *testing.T, link string) *os.File {
	t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	// See listeners/serial_rig_test.go: a blocking master's Read cannot
	// be interrupted; a non-blocking duplicate is served by the poller.
	fd, err := syscall.Dup(int(ptm.Fd()))
	ptm.Close()
	if err == nil {
		syscall.CloseOnExec(fd)
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		pts.Close()
		t.Fatal(err)
	}
	m := os.NewFile(uintptr(fd), "ptmx")
	if err := os.Symlink(pts.Name(), link); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // the gateway's CONNACK and whatever follows
		defer close(done)
		io.Copy(io.Discard, m)
	}()
	t.Cleanup(func() {
		m.Close()
		<-done
		pts.Close()
	})
	return m
}

func newStatusEnv(t *testing.T) *statusEnv {
	t.Helper()
	bin := buildEdgegw(t)
	e := &statusEnv{t: t, dir: t.TempDir(), local: freePort(t), cloud: freePort(t), web: freePort(t),
		tls: freePort(t), cloudData: t.TempDir()}
	certPath, keyPath := filepath.Join(e.dir, "listener.crt"), filepath.Join(e.dir, secretKeyName)
	writeSelfSigned(t, certPath, keyPath)
	dev := filepath.Join(e.dir, "ttyRS485")
	cfg := filepath.Join(e.dir, "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
  - {name: lan-tls, type: tcp, address: "%s", tls: {cert: "%s", key: "%s"}}
  - {name: rs485, type: serial, device: "%s", baud: 115200, framing: cobs-crc16}
metrics: {address: "%s"}
bridges:
  - name: cloud
    addresses: ["tcp://%s", "tcp://edge:%s@%s"]
    client_id: edge-status
    username: edge
    password: %s
    keepalive: 2s
    ack_timeout: 10s
    reconnect_min: 100ms
    reconnect_max: 300ms
    topics:
      - {pattern: "sensors/#", direction: out, qos: 1}
`, e.local, e.tls, certPath, keyPath, dev, e.web, e.cloud, secretURLPassword, e.cloud, secretBridgePassword)), 0o600)
	// mosquitto accepts any user (allow_anonymous true ignores passwords).
	e.up = startMosquitto(t, e.cloud, e.cloudData)
	e.serial = openPty(t, dev) // plugged in before the gateway starts
	e.g = startEdgegw(t, bin, "--config", cfg)
	e.waitJSON("bridge connected", func(s statusDoc) bool { return s.Bridges[0].State == "connected" })
	return e
}

// statusDoc is the part of status.json the tests wait on.
type statusDoc struct {
	Broker struct {
		Connections   int `json:"connections"`
		Subscriptions int `json:"subscriptions"`
		MessagesSent  int `json:"messages_sent"`
		Inflight      int `json:"inflight"`
	} `json:"broker"`
	Bridges []struct {
		State           string   `json:"state"`
		Acked           int      `json:"acked"`
		BacklogMessages int      `json:"backlog_messages"`
		TimeToEmpty     *float64 `json:"time_to_empty_seconds"`
		LastError       string   `json:"last_error"`
	} `json:"bridges"`
	Listeners []struct {
		Name    string `json:"name"`
		Clients []struct {
			ClientID string `json:"client_id"`
		} `json:"clients"`
	} `json:"listeners"`
	SerialLinks []struct {
		State      string           `json:"state"`
		FramesGood int              `json:"frames_good"`
		FramesBad  map[string]int64 `json:"frames_corrupt"`
	} `json:"serial_links"`
}

func (e *statusEnv) get(path string) (int, http.Header, string) {
	e.t.Helper()
	resp, err := http.Get("http://" + e.web + path)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (e *statusEnv) doc() (statusDoc, string) {
	var d statusDoc
	code, _, body := e.get("/status.json")
	if code != 200 {
		return d, body
	}
	json.Unmarshal([]byte(body), &d)
	return d, body
}

func (e *statusEnv) waitJSON(what string, cond func(statusDoc) bool) string {
	e.t.Helper()
	var body string
	testutil.Eventually(e.t, 20*time.Second, what, func() bool {
		d, b := e.doc()
		body = b
		return len(d.Bridges) > 0 && cond(d)
	})
	return body
}

func (e *statusEnv) pub(ctx context.Context, topic, msg string) {
	e.t.Helper()
	h, p, _ := net.SplitHostPort(e.local)
	out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", h, "-p", p, "-q", "1", "-i", "pub-once", "-t", topic, "-m", msg).CombinedOutput()
	if err != nil {
		e.t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
}

func clientIDs(d statusDoc, listener string) []string {
	var ids []string
	for _, l := range d.Listeners {
		if l.Name == listener {
			for _, c := range l.Clients {
				ids = append(ids, c.ClientID)
			}
		}
	}
	return ids
}

// normalise replaces what changes from run to run (times, ports, paths,
// memory, rates) so status.json can be compared with a golden file.
func (e *statusEnv) normalise(body string) string {
	e.t.Helper()
	for old, tok := range map[string]string{e.local: "<lan>", e.tls: "<lan-tls>", e.cloud: "<cloud>", e.web: "<web>", e.dir: "<dir>"} {
		body = strings.ReplaceAll(body, old, tok)
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		e.t.Fatalf("status.json: %v\n%s", err, body)
	}
	volatile := map[string]bool{"generated_at": true, "started_at": true, "uptime_seconds": true, "version": true,
		"since": true, "connected_since": true, "last_open": true, "remote": true, "in_per_second": true,
		"drain_per_second": true, "time_to_empty_seconds": true, "go_total_bytes": true, "go_limit_bytes": true,
		"resident_bytes": true, "address": true}
	var walk func(x any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, val := range x {
				if volatile[k] && val != nil {
					if k == "address" { // a listener's is stable; the bridge's current one is one of two
						if s, _ := val.(string); strings.Contains(s, "<cloud>") {
							x[k] = "<one of addresses>"
						}
						continue
					}
					x[k] = "<" + k + ">"
					continue
				}
				walk(val)
			}
		case []any:
			for _, val := range x {
				walk(val)
			}
		}
	}
	walk(v)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
	return out.String()
}

// TestBinaryStatusPage runs the real binary with a bridge to mosquitto, a
// serial sensor on a pty (one good session, one corrupt frame) and MQTT
// clients, and checks status.json against a golden file and the page for
// the facts a person looks for, through an uplink outage and recovery.
func TestBinaryStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := newStatusEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A v5 subscriber that stays connected.
	d0, _ := e.doc()
	h, p, _ := net.SplitHostPort(e.local)
	watcher := exec.CommandContext(ctx, "mosquitto_sub", "-h", h, "-p", p, "-V", "mqttv5", "-i", "watcher",
		"-t", "sensors/#", "-q", "1")
	watcher.Stdout = io.Discard
	if err := watcher.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { watcher.Process.Kill(); watcher.Wait() }()
	e.waitJSON("watcher subscribed", func(d statusDoc) bool { return d.Broker.Subscriptions == d0.Broker.Subscriptions+1 })

	// A serial sensor (3.1.1): CONNECT, one corrupt frame, one PUBLISH.
	m := e.serial
	e.waitJSON("serial link open", func(d statusDoc) bool {
		return len(d.SerialLinks) == 1 && d.SerialLinks[0].State == "open"
	})
	send := func(pk packet.Packet) {
		t.Helper()
		b, err := packet.Append(nil, pk, packet.V311)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Write(framing.AppendFrame(nil, b)); err != nil {
			t.Fatal(err)
		}
	}
	send(&packet.Connect{Version: packet.V311, ClientID: "sensor-7", CleanStart: true, KeepAlive: 0})
	e.waitJSON("serial sensor connected", func(d statusDoc) bool { return len(clientIDs(d, "rs485")) == 1 })
	junk := []byte{0xC0, 0x00}
	c := framing.CRC16(junk)
	bad := framing.AppendEncode(nil, append(junk, byte(c>>8)^0xFF, byte(c)^0xFF))
	m.Write(append(bad, 0x00))
	send(&packet.Publish{Topic: "sensors/serial/t", Payload: []byte("21.5")})

	for i := range 3 {
		e.pub(ctx, "sensors/lan/t", fmt.Sprint("m", i))
	}
	body := e.waitJSON("4 messages bridged and delivered", func(d statusDoc) bool {
		return d.Bridges[0].Acked == 4 && d.Broker.MessagesSent == 4 && len(d.SerialLinks) == 1 &&
			d.SerialLinks[0].FramesGood == 2 && d.SerialLinks[0].FramesBad["crc"] == 1 &&
			strings.Join(clientIDs(d, "lan"), ",") == "watcher" && d.Broker.Connections == 2 &&
			d.Bridges[0].BacklogMessages == 0 && d.Broker.Inflight == 0 // the watcher acked them all
	})

	golden := filepath.Join("testdata", "status.golden.json")
	got := e.normalise(body)
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("status.json differs from %s (run with -update after checking):\n%s", golden, got)
	}

	page := func() string {
		t.Helper()
		code, hdr, b := e.get("/")
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			t.Fatalf("GET /: %d %s\n%s", code, hdr.Get("Content-Type"), b)
		}
		return b
	}
	mustHave := func(what, html string, facts ...string) {
		t.Helper()
		for _, f := range facts {
			if !strings.Contains(html, f) {
				t.Errorf("%s: page lacks %q", what, f)
			}
		}
	}
	up := page()
	mustHave("connected", up, "Uplink cloud: connected", "tcp://"+e.cloud, "tcp://edge:xxxxx@"+e.cloud,
		"sensor-7", "watcher", "5.0", "3.1.1", "rs485", e.dir+"/ttyRS485 @ 115200", "cobs-crc16",
		`data-k="serial_links.0.state">open<`, `data-k="serial_links.0.frames_good">2<`,
		`data-k="serial_links.0.frames_corrupt.crc">1<`, `data-k="bridges.0.acked">4<`,
		`data-k="bridges.0.time_to_empty_seconds" data-f="eta">empty<`, "queue_full", "bridge cloud: spool full",
		"chart.svg?bridge=cloud&amp;kind=rate", "lan-tls", "tcp+tls", ">64.0 MiB</span> budget", "<script>")
	for _, kind := range []string{"rate", "backlog"} {
		code, hdr, svg := e.get("/chart.svg?bridge=cloud&kind=" + kind)
		if code != 200 || hdr.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(svg, "<svg") {
			t.Errorf("chart %s: %d %s %.80q", kind, code, hdr.Get("Content-Type"), svg)
		}
	}
	if code, _, _ := e.get("/chart.svg?bridge=nope&kind=rate"); code != 404 {
		t.Errorf("chart of an unknown bridge: %d, want 404", code)
	}
	resp, err := http.Post("http://"+e.web+"/", "text/plain", nil)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %v %v, want 405", err, resp)
	}
	if resp != nil {
		resp.Body.Close()
	}

	// Outage: the cloud broker stops; local messages are spooled.
	e.up.Stop()
	e.waitJSON("bridge down", func(d statusDoc) bool { return d.Bridges[0].State == "disconnected" })
	for i := range 5 {
		e.pub(ctx, "sensors/lan/t", fmt.Sprint("down", i))
	}
	e.waitJSON("backlog of 5 and a refused reconnect", func(d statusDoc) bool {
		return d.Bridges[0].BacklogMessages == 5 && strings.Contains(d.Bridges[0].LastError, "refused")
	})
	down := page()
	mustHave("outage", down, "Uplink cloud: DISCONNECTED for", `class="state disconnected"`,
		`data-k="bridges.0.backlog_messages">5<`, "nothing accepts connections on that port", "connection refused",
		`data-f="eta">not draining<`)
	t.Logf("during the outage the page said: %s", bannerOf(down))

	// Recovery: the backlog drains.
	e.up = startMosquitto(t, e.cloud, e.cloudData)
	e.waitJSON("drained after recovery", func(d statusDoc) bool {
		return d.Bridges[0].State == "connected" && d.Bridges[0].BacklogMessages == 0 && d.Bridges[0].Acked == 9
	})
	after := page()
	mustHave("recovered", after, "Uplink cloud: connected", `data-k="bridges.0.backlog_messages">0<`,
		`data-f="eta">empty<`, `data-k="bridges.0.acked">9<`, `data-k="bridges.0.disconnects">1<`)
	t.Logf("after recovery the page said: %s", bannerOf(after))

	// No secret from the config anywhere.
	for _, doc := range []string{up, down, after, body} {
		for _, s := range []string{secretBridgePassword, secretURLPassword, secretKeyName} {
			if strings.Contains(doc, s) {
				t.Errorf("secret %q on the status page or in status.json", s)
			}
		}
	}
}

// bannerOf is the page's first uplink banner line, for the log.
func bannerOf(html string) string {
	i := strings.Index(html, `<p class="banner`)
	if i < 0 {
		return ""
	}
	rest := html[i:]
	j := bytes.IndexByte([]byte(rest), '>')
	k := strings.Index(rest, "</p>")
	if j < 0 || k < j {
		return ""
	}
	return rest[j+1 : k]
}
