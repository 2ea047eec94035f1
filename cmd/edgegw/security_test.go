package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of authentication and the ACL through the binary, with stock
// mosquitto clients.

// authGateway is the binary with a password file (each user's password
// is the user name followed by "pw") and the ACL text, anonymous clients
// refused.
func authGateway(t *testing.T, acl string, users ...string) *harness {
	t.Helper()
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs mosquitto-clients): %v", tool, err)
		}
	}
	dir := t.TempDir()
	var pairs []string
	for _, u := range users {
		pairs = append(pairs, u, u+"pw")
	}
	passwd := writePasswd(t, filepath.Join(dir, "passwd"), pairs...)
	os.WriteFile(filepath.Join(dir, "acl"), []byte(acl), 0o600)
	g := newHarness(t)
	g.Auth(false, passwd, filepath.Join(dir, "acl"))
	return g
}

// mosqAs is a mosquitto client command as user (password user+"pw")
// against the gateway, ended after 20 s.
func mosqAs(t *testing.T, g *harness, tool, user string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	host, port := hostPort(g.Addr)
	return exec.CommandContext(ctx, tool, append([]string{"-h", host, "-p", port, "-u", user, "-P", user + "pw"}, args...)...)
}

// TestBinarySecurity: the ACL does not leak through an overlapping
// wildcard, another user cannot take a session, and the configured topic
// depth and subscription limits hold.
func TestBinarySecurity(t *testing.T) {
	g := authGateway(t, `user alice
topic readwrite shared/#
topic deny shared/secret/#
user bob
topic readwrite bob/#
topic readwrite shared/#
topic readwrite deep/#
`, "alice", "bob")
	g.NoMetrics()
	g.Cfg.Limits = map[string]any{"max_topic_levels": 8, "max_subscriptions": 2}
	g.Start()
	mosq := func(tool, user string, args ...string) *exec.Cmd { return mosqAs(t, g, tool, user, args...) }
	pub := func(user string, args ...string) {
		t.Helper()
		if out, err := mosq("mosquitto_pub", user, append([]string{"-q", "1"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub %v: %v %s", args, err, out)
		}
	}
	run := func(c *exec.Cmd) string {
		out, _ := c.CombinedOutput()
		return string(out)
	}

	t.Run("wildcard does not leak a denied subtree", func(t *testing.T) {
		// A retained secret and a retained public message: the subscribe
		// gets the public one only; then a live secret and a live public.
		pub("bob", "-r", "-t", "shared/secret/x", "-m", "rleak")
		pub("bob", "-r", "-t", "shared/public/x", "-m", "rok")
		sub := mosq("mosquitto_sub", "alice", "-q", "1", "-t", "shared/+/x", "-v", "-C", "2", "-W", "15")
		var out testutil.LogBuffer // written by exec's copying goroutine, read here
		sub.Stdout = &out
		if err := sub.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until alice has the retained message (she is subscribed).
		testutil.Eventually(t, 10*time.Second, "retained message", func() bool { return strings.Contains(out.String(), "rok") })
		pub("bob", "-t", "shared/secret/x", "-m", "leak")
		pub("bob", "-t", "shared/public/x", "-m", "ok")
		sub.Wait()
		if got := strings.TrimSpace(out.String()); got != "shared/public/x rok\nshared/public/x ok" {
			t.Fatalf("alice received %q", got)
		}
	})

	t.Run("another user cannot take a session", func(t *testing.T) {
		if out := run(mosq("mosquitto_sub", "bob", "-i", "bob-device", "-c", "-q", "1", "-t", "bob/#", "-E")); out != "" {
			t.Fatalf("bob's subscribe: %s", out)
		}
		pub("bob", "-t", "bob/x", "-m", "for-bob")
		out := run(mosq("mosquitto_sub", "alice", "-i", "bob-device", "-c", "-q", "1", "-t", "shared/#", "-W", "3"))
		if !strings.Contains(out, "not authorised") || strings.Contains(out, "for-bob") {
			t.Fatalf("alice with bob's client id: %q", out)
		}
		if out := run(mosq("mosquitto_sub", "bob", "-i", "bob-device", "-c", "-q", "1", "-t", "bob/#", "-C", "1", "-W", "10")); strings.TrimSpace(out) != "for-bob" {
			t.Fatalf("bob's session: %q", out)
		}
	})

	t.Run("limits.max_topic_levels", func(t *testing.T) {
		out := run(mosq("mosquitto_sub", "bob", "-t", "deep/1/2/3/4/5/6/7/8", "-W", "3", "-d"))
		if !strings.Contains(out, "SUBACK") || !strings.Contains(out, "All subscription requests were denied") {
			t.Fatalf("a 9-level filter under max_topic_levels 8: %q", out)
		}
		out = run(mosq("mosquitto_sub", "bob", "-t", "deep/1/2/3/4/5/6/7", "-E", "-d"))
		if strings.Contains(out, "denied") || !strings.Contains(out, "SUBACK") {
			t.Fatalf("an 8-level filter under max_topic_levels 8: %q", out)
		}
	})

	t.Run("limits.max_subscriptions", func(t *testing.T) {
		out := run(mosq("mosquitto_sub", "bob", "-t", "bob/1", "-t", "bob/2", "-t", "bob/3", "-E", "-d"))
		if !strings.Contains(out, "Subscribed (mid: 1): 0, 0, 128") {
			t.Fatalf("3 filters under max_subscriptions 2: %q", out)
		}
	})
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
	g := authGateway(t, docSecurityACL(t), "alice", "bob")
	g.WriteConfig()
	if code, _, stderr := call(t, "check-config", "--config", g.ConfigPath); code != 0 {
		t.Fatalf("check-config with the ACL of docs/security.md: exit %d\n%s", code, stderr)
	}
	g.Start()
	mosq := func(tool, user string, args ...string) string {
		t.Helper()
		out, _ := mosqAs(t, g, tool, user, append([]string{"-d"}, args...)...).CombinedOutput()
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

	resp, err := http.Get("http://" + g.Metrics + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("status page Cache-Control %q, docs/status-page.md says no-store", got)
	}
	mresp, err := http.Get("http://" + g.Metrics + "/metrics")
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
