package main

import (
	"context"
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
// only inline style and script and same-origin requests).
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
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "style-src 'unsafe-inline'", "script-src 'unsafe-inline'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("status page CSP %q lacks %q", csp, want)
		}
	}
}
