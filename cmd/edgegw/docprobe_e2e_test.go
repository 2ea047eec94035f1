package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of examples in docs/ and configs/ taken as a new user takes them:
// pasted as they are, not rewritten for the test.

// TestDocReferenceConfigExamplesUncommented follows configs/edgegw.yaml's
// own instruction for its example blocks to the letter: "remove one
// leading "#" from each line (and the "bridges: []" line above)". The
// result must be a valid config. (The serial block's explanatory lines
// once started with a single "#", which left " A device that ..." behind:
// invalid YAML.)
func TestDocReferenceConfigExamplesUncommented(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	text, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, blocks := false, 0
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case strings.HasPrefix(line, "# ---8<---"):
			if !strings.Contains(line, `remove one leading "#" from each line`) {
				t.Fatalf("example block no longer says how to enable it: %q", line)
			}
			in = true
			blocks++
			continue
		case strings.HasPrefix(line, "# --->8---"):
			in = false
			continue
		case line == "bridges: []":
			continue
		case in:
			if !strings.HasPrefix(line, "#") {
				t.Fatalf("line in an example block without a leading #: %q", line)
			}
			line = line[1:]
		}
		out = append(out, line)
	}
	if blocks != 2 {
		t.Fatalf("found %d example blocks, want 2 (serial listener, bridge)", blocks)
	}
	code, stdout, stderr := call(t, "check-config", "--config", writeConfig(t, strings.Join(out, "\n")))
	if code != 0 {
		t.Fatalf("check-config of the uncommented reference config: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"type: serial", "device: /dev/ttyUSB0", "name: cloud", "remote_prefix: site-a/"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("effective config lacks %q:\n%s", want, stdout)
		}
	}
}

// docSecurityACL returns the example ACL file of docs/security.md: the
// indented block after "With it, anything no rule allows is refused.",
// unindented.
func docSecurityACL(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "With it, anything no rule allows is refused.\n"
	i := strings.Index(string(doc), anchor)
	if i < 0 {
		t.Fatalf("docs/security.md: %q not found", anchor)
	}
	var acl []string
	for _, line := range strings.Split(string(doc)[i+len(anchor):], "\n") {
		if line != "" && !strings.HasPrefix(line, "    ") {
			break
		}
		acl = append(acl, strings.TrimPrefix(line, "    "))
	}
	if !strings.Contains(strings.Join(acl, "\n"), "user alice") {
		t.Fatalf("docs/security.md: no example ACL after %q", anchor)
	}
	return strings.Join(acl, "\n")
}

// TestBinaryDocSecurityACLExample loads docs/security.md's example ACL as
// it is printed and checks what the page says of it through the binary
// with mosquitto clients: alice may subscribe to shared/# but not inside
// shared/secret/#; bob's "topic write sensors/bob/#" lets him publish
// there and not read it; "pattern readwrite clients/%c/#" gives a client
// its own subtree. It also checks the status page's promised headers
// (docs/status-page.md, Access: Cache-Control no-store, a CSP that allows
// only inline style and script and same-origin requests), and that
// /metrics says it is Prometheus text format 0.0.4 (docs/metrics.md).
func TestBinaryDocSecurityACLExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs mosquitto-clients): %v", tool, err)
		}
	}
	dir := t.TempDir()
	var pw strings.Builder
	for _, u := range []string{"alice", "bob"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"pw"), bcrypt.MinCost)
		pw.WriteString(u + ":" + string(h) + "\n")
	}
	os.WriteFile(filepath.Join(dir, "passwd"), []byte(pw.String()), 0o600)
	os.WriteFile(filepath.Join(dir, "acl"), []byte(docSecurityACL(t)), 0o600)
	addr, metricsAddr := freePort(t), freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	cfg := filepath.Join(dir, "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
auth: {allow_anonymous: false, password_file: %s, acl_file: %s}
`, addr, metricsAddr, filepath.Join(dir, "passwd"), filepath.Join(dir, "acl"))), 0o600)
	if code, _, stderr := call(t, "check-config", "--config", cfg); code != 0 {
		t.Fatalf("check-config with the ACL of docs/security.md: exit %d\n%s", code, stderr)
	}
	startEdgegw(t, buildEdgegw(t), "--config", cfg)
	waitListening(t, addr)
	mosq := func(tool, user string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, tool, append([]string{"-h", host, "-p", port, "-u", user, "-P", user + "pw", "-d"}, args...)...).CombinedOutput()
		return string(out)
	}
	granted := func(user string, args ...string) bool {
		t.Helper()
		out := mosq("mosquitto_sub", user, append(args, "-E")...)
		if !strings.Contains(out, "received SUBACK") {
			t.Fatalf("mosquitto_sub %s %v: no SUBACK:\n%s", user, args, out)
		}
		return !strings.Contains(out, "denied")
	}
	// MQTT 5: a refused publish gets PUBACK reason 0x87 (135).
	published := func(user, topic string, args ...string) bool {
		t.Helper()
		out := mosq("mosquitto_pub", user, append([]string{"-V", "5", "-q", "1", "-t", topic, "-m", "x"}, args...)...)
		if !strings.Contains(out, "received PUBACK") {
			t.Fatalf("mosquitto_pub %s %s: no PUBACK:\n%s", user, topic, out)
		}
		return !strings.Contains(out, "RC:135")
	}
	for _, c := range []struct {
		what string
		got  bool
		want bool
	}{
		{"alice subscribes shared/#", granted("alice", "-t", "shared/#"), true},
		{"alice subscribes shared/+/x", granted("alice", "-t", "shared/+/x"), true},
		{"alice subscribes shared/secret/# (inside the deny)", granted("alice", "-t", "shared/secret/#"), false},
		{"alice subscribes shared/secret/+ (v5)", granted("alice", "-V", "5", "-t", "shared/secret/+"), false},
		{"alice publishes shared/public/x", published("alice", "shared/public/x"), true},
		{"alice publishes shared/secret/x", published("alice", "shared/secret/x"), false},
		{"bob publishes sensors/bob/t", published("bob", "sensors/bob/t"), true},
		{"bob subscribes sensors/bob/# (write-only)", granted("bob", "-t", "sensors/bob/#"), false},
		{"bob publishes shared/x", published("bob", "shared/x"), false},
		{"bob subscribes $SYS/# (anonymous rules only)", granted("bob", "-t", "$SYS/#"), false},
		{"bob as client dev7 subscribes clients/dev7/#", granted("bob", "-i", "dev7", "-t", "clients/dev7/#"), true},
		{"bob as client dev7 publishes clients/dev7/cmd", published("bob", "clients/dev7/cmd", "-i", "dev7"), true},
		{"bob as client dev7 publishes clients/dev8/cmd", published("bob", "clients/dev8/cmd", "-i", "dev7"), false},
		{"bob as client dev7 subscribes clients/dev8/#", granted("bob", "-i", "dev7", "-t", "clients/dev8/#"), false},
		{"alice subscribes users/alice/inbox", granted("alice", "-t", "users/alice/inbox"), true},
		{"alice subscribes users/bob/inbox", granted("alice", "-t", "users/bob/inbox"), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: allowed %v, docs/security.md says %v", c.what, c.got, c.want)
		}
	}

	resp, err := http.Get("http://" + metricsAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("status page Cache-Control %q, docs/status-page.md says no-store", got)
	}
	mresp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mresp.Body.Close()
	if got := mresp.Header.Get("Content-Type"); !strings.Contains(got, "version=0.0.4") {
		t.Errorf("/metrics Content-Type %q, docs/metrics.md says text format 0.0.4", got)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "style-src 'unsafe-inline'", "script-src 'unsafe-inline'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("status page CSP %q lacks %q", csp, want)
		}
	}
}

// docFramingMain drives the C functions of docs/serial-framing.md as a
// firmware would: it checks the CRC's check value, then writes to stdout
// the leading 0x00 the page recommends and three frames, a 3.1.1 CONNECT
// (client id "c1") and two retained QoS 0 PUBLISHes, "from-c" to doc/c and
// 600 digits to doc/long (longer than 254 bytes, so that COBS code 0xFF
// is used), each packet || CRC16 big-endian, COBS-encoded by cobs_encode,
// then 0x00.
const docFramingMain = `
#include <stdio.h>
#include <string.h>

static void frame(const uint8_t *pkt, size_t n)
{
    uint8_t buf[1024], enc[1100];
    uint16_t crc = crc16(pkt, n);
    memcpy(buf, pkt, n);
    buf[n] = (uint8_t)(crc >> 8);
    buf[n + 1] = (uint8_t)crc;
    size_t m = cobs_encode(buf, n + 2, enc);
    fwrite(enc, 1, m, stdout);
    fputc(0, stdout);
}

/* A retained QoS 0 PUBLISH; remaining length < 16384. */
static void publish(const char *topic, const char *payload)
{
    uint8_t p[1024];
    size_t t = strlen(topic), n = strlen(payload), rl = 2 + t + n, i = 0;
    p[i++] = 0x31;
    if (rl < 128) {
        p[i++] = (uint8_t)rl;
    } else {
        p[i++] = (uint8_t)(0x80 | (rl & 0x7f));
        p[i++] = (uint8_t)(rl >> 7);
    }
    p[i++] = 0;
    p[i++] = (uint8_t)t;
    memcpy(p + i, topic, t);
    memcpy(p + i + t, payload, n);
    frame(p, i + t + n);
}

int main(void)
{
    if (crc16((const uint8_t *)"123456789", 9) != 0x29B1)
        return 1;
    static const uint8_t connect[] = {0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02,
                                      0x00, 0x3c, 0x00, 0x02, 'c', '1'};
    char long_payload[601];
    for (int i = 0; i < 600; i++)
        long_payload[i] = (char)('0' + i % 10);
    long_payload[600] = 0;
    fputc(0, stdout);
    frame(connect, sizeof connect);
    publish("doc/c", "from-c");
    publish("doc/long", long_payload);
    return 0;
}
`

// TestBinaryDocSerialFramingC compiles the C code of
// docs/serial-framing.md (crc16_update, crc16, cobs_encode) as printed,
// and has it frame a CONNECT and two PUBLISHes that the binary's serial
// listener, on a pty, must take: a subscriber gets both messages. The page's
// byte vectors are checked by devices/framing TestDocVectors; this checks
// the code a firmware author copies.
func TestBinaryDocSerialFramingC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("no C compiler (make test installs gcc): %v", err)
	}
	doc, err := os.ReadFile("../../docs/serial-framing.md")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, part := range strings.Split(string(doc), "```c\n")[1:] {
		end := strings.Index(part, "```")
		if end < 0 {
			t.Fatal("docs/serial-framing.md: unterminated C block")
		}
		code = append(code, part[:end])
	}
	if len(code) != 2 {
		t.Fatalf("docs/serial-framing.md: %d C blocks, want 2 (CRC, COBS)", len(code))
	}
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "framing.c"), filepath.Join(dir, "framing")
	os.WriteFile(src, []byte(strings.Join(code, "\n")+docFramingMain), 0o600)
	if out, err := exec.Command(cc, "-std=c99", "-Wall", "-Werror", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("the C code of docs/serial-framing.md does not compile: %v\n%s", err, out)
	}
	frames, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatalf("the C code of docs/serial-framing.md: %v (CRC check value not 0x29B1?)", err)
	}

	link := filepath.Join(dir, "tty")
	m := openPty(t, link)
	addr := freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, address: "%s"}
  - {name: uart, type: serial, device: %s}
metrics: {address: ""}
`, addr, link))
	g := startEdgegw(t, buildEdgegw(t), "--config", cfg)
	waitListening(t, addr)
	testutil.Eventually(t, 10*time.Second, "serial device open", func() bool {
		return strings.Contains(g.logs(), "device open")
	})
	if _, err := m.Write(frames); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-t", "doc/c", "-t", "doc/long", "-v", "-C", "2", "-W", "10").CombinedOutput()
	want := "doc/c from-c\ndoc/long " + strings.Repeat("0123456789", 60)
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		t.Fatalf("subscriber to doc/c and doc/long: %v %q, want %q (frames % x)", err, got, want, frames)
	}
}

// TestBinaryDocStatusJSONFailedBridge: docs/status-page.md says a bridge's
// state in /status.json is connected, disconnected or failed; a bridge
// whose spool cannot open (a file where its directory should be) is
// "failed" there, as in $SYS/bridge/<name>/state and /healthz.
func TestBinaryDocStatusJSONFailedBridge(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "state", "bridges"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state", "bridges", "cloud"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, metricsAddr := freePort(t), freePort(t)
	cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: %s}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    topics: [{pattern: "s/#"}]
`, addr, metricsAddr, filepath.Join(dir, "state"), freePort(t)))
	startEdgegw(t, buildEdgegw(t), "--config", cfg)
	waitListening(t, metricsAddr)
	testutil.Eventually(t, 10*time.Second, `status.json bridge state "failed"`, func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/status.json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var doc struct {
			Bridges []struct{ Name, State string } `json:"bridges"`
		}
		if json.NewDecoder(resp.Body).Decode(&doc) != nil || len(doc.Bridges) != 1 {
			return false
		}
		return doc.Bridges[0].State == "failed"
	})
}
