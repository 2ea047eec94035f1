package main

// Issue 13 against the real binary with stock mosquitto clients: the ACL
// leak through an overlapping wildcard, session takeover by another user,
// and a configured topic depth limit (limits.max_topic_levels).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/internal/testutil"
)

func TestBinarySecurity(t *testing.T) {
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
	os.WriteFile(filepath.Join(dir, "acl"), []byte(`user alice
topic readwrite shared/#
topic deny shared/secret/#
user bob
topic readwrite bob/#
topic readwrite shared/#
topic readwrite deep/#
`), 0o600)
	addr := freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	cfg := filepath.Join(dir, "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
limits: {max_topic_levels: 8, max_subscriptions: 2}
auth: {allow_anonymous: false, password_file: %s, acl_file: %s}
`, addr, filepath.Join(dir, "passwd"), filepath.Join(dir, "acl"))), 0o600)
	startEdgegw(t, buildEdgegw(t), "--config", cfg)
	waitListening(t, addr)
	mosq := func(tool, user string, args ...string) *exec.Cmd {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return exec.CommandContext(ctx, tool, append([]string{"-h", host, "-p", port, "-u", user, "-P", user + "pw"}, args...)...)
	}
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
		var out lockedBuffer // written by exec's copying goroutine, read here
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
