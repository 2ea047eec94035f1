package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestStatusPageAuth: with metrics.address beyond loopback and a password
// file, the page and status.json need basic auth of a user in that file;
// on loopback, or without a password file, they do not.
func TestStatusPageAuth(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := auth.SetPassword(pw, "operator", []byte("cabinet-42")); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{PasswordFile: pw}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{}, nil)
	get := func(cfg config.Config, f *auth.Files, path, user, pass string) int {
		t.Helper()
		h := newStatusPage(cfg, gw, nil, nil, f)
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("401 without a Basic challenge")
		}
		return rec.Code
	}
	cfg := config.Default()
	cfg.Auth.PasswordFile = pw

	cfg.Metrics.Address = "0.0.0.0:18830" // exposed
	for _, path := range []string{"/", "/status.json"} {
		if c := get(cfg, files, path, "", ""); c != http.StatusUnauthorized {
			t.Errorf("exposed %s without credentials: %d, want 401", path, c)
		}
		if c := get(cfg, files, path, "operator", "wrong"); c != http.StatusUnauthorized {
			t.Errorf("exposed %s with a wrong password: %d, want 401", path, c)
		}
		if c := get(cfg, files, path, "operator", "cabinet-42"); c != http.StatusOK {
			t.Errorf("exposed %s with the password: %d, want 200", path, c)
		}
	}
	for _, addr := range []string{"127.0.0.1:18830", "[::1]:18830", "localhost:18830"} {
		cfg.Metrics.Address = addr
		if c := get(cfg, files, "/", "", ""); c != http.StatusOK {
			t.Errorf("%s (loopback) without credentials: %d, want 200", addr, c)
		}
	}
	cfg.Metrics.Address, cfg.Auth.PasswordFile = "0.0.0.0:18830", ""
	if c := get(cfg, nil, "/", "", ""); c != http.StatusOK {
		t.Errorf("exposed without a password file: %d, want 200 (nothing to check against)", c)
	}
}

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
	t      *testing.T
	dir    string
	tls    string
	g      *harness
	up     *cloud
	serial *os.File // the sensor's end of the pty
}

func newStatusEnv(t *testing.T) *statusEnv {
	t.Helper()
	// mosquitto accepts any user (allow_anonymous true ignores passwords).
	e := &statusEnv{t: t, dir: t.TempDir(), tls: freePort(t), up: startCloud(t, true), g: newHarness(t)}
	certPath, key := writeCert(t, e.dir, "listener", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	keyPath := filepath.Join(e.dir, secretKeyName) // a name the status page must not show
	if err := os.Rename(key, keyPath); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(e.dir, "ttyRS485")
	e.g.Listener(listenerConf{Name: "lan-tls", Type: "tcp", Address: e.tls, TLS: map[string]any{"cert": certPath, "key": keyPath}})
	e.g.Listener(listenerConf{Name: "rs485", Type: "serial", Device: dev, Baud: 115200, Framing: "cobs-crc16"})
	e.g.Bridge("cloud", e.up.Addr, "tcp://edge:"+secretURLPassword+"@"+e.up.Addr).
		With("username", "edge").With("password", secretBridgePassword).
		With("keepalive", "2s").With("ack_timeout", "10s").FastReconnect().Out("sensors/#", 1).
		With("address_order", "strict") // addresses in the golden file as listed (spread orders them by port)
	e.serial = openPty(t, dev) // plugged in before the gateway starts
	e.g.Start()
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

func (e *statusEnv) doc() (statusDoc, string) {
	var d statusDoc
	code, _, body := e.g.Get("/status.json")
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

func (e *statusEnv) pub(topic, msg string) {
	e.t.Helper()
	e.g.Mosq("mosquitto_pub", "-q", "1", "-i", "pub-once", "-t", topic, "-m", msg)
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
	for old, tok := range map[string]string{e.g.Addr: "<lan>", e.tls: "<lan-tls>", e.up.Addr: "<cloud>", e.g.Metrics: "<web>", e.dir: "<dir>"} {
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
	e := newStatusEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A v5 subscriber that stays connected.
	d0, _ := e.doc()
	h, p := hostPort(e.g.Addr)
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
		e.pub("sensors/lan/t", fmt.Sprint("m", i))
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
		code, hdr, b := e.g.Get("/")
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
	mustHave("connected", up, "Uplink cloud: connected", "tcp://"+e.up.Addr, "tcp://edge:xxxxx@"+e.up.Addr,
		"sensor-7", "watcher", "5.0", "3.1.1", "rs485", e.dir+"/ttyRS485 @ 115200", "cobs-crc16",
		`data-k="serial_links.0.state">open<`, `data-k="serial_links.0.frames_good">2<`,
		`data-k="serial_links.0.frames_corrupt.crc">1<`, `data-k="bridges.0.acked">4<`,
		`data-k="bridges.0.time_to_empty_seconds" data-f="eta">empty<`, "queue_full", "bridge cloud: spool full",
		"chart.svg?bridge=cloud&amp;kind=rate", "lan-tls", "tcp+tls", ">64.0 MiB</span> budget", "<script>")
	for _, kind := range []string{"rate", "backlog"} {
		code, hdr, svg := e.g.Get("/chart.svg?bridge=cloud&kind=" + kind)
		if code != 200 || hdr.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(svg, "<svg") {
			t.Errorf("chart %s: %d %s %.80q", kind, code, hdr.Get("Content-Type"), svg)
		}
	}
	if code, _, _ := e.g.Get("/chart.svg?bridge=nope&kind=rate"); code != 404 {
		t.Errorf("chart of an unknown bridge: %d, want 404", code)
	}
	resp, err := http.Post("http://"+e.g.Metrics+"/", "text/plain", nil)
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
		e.pub("sensors/lan/t", fmt.Sprint("down", i))
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
	e.up.Start()
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

// TestBinaryDocStatusJSONFailedBridge: docs/status-page.md says a bridge's
// state in /status.json is connected, disconnected or failed; a bridge
// whose spool cannot open (a file where its directory should be) is
// "failed" there, as in $SYS/bridge/<name>/state and /healthz.
func TestBinaryDocStatusJSONFailedBridge(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	g := newHarness(t)
	dir := g.Persist("", "")
	if err := os.MkdirAll(filepath.Join(dir, "bridges"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bridges", "cloud"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g.Bridge("cloud", freePort(t)).Topic(topicConf{Pattern: "s/#"})
	g.Start()
	testutil.Eventually(t, 10*time.Second, `status.json bridge state "failed"`, func() bool {
		var doc struct {
			Bridges []struct{ Name, State string } `json:"bridges"`
		}
		return g.Status(&doc) == nil && len(doc.Bridges) == 1 && doc.Bridges[0].State == "failed"
	})
}
