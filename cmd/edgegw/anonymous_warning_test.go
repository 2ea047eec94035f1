package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/internal/config"
)

// TestCheckConfigWarnsAnonymousNetworkListener holds docs/install.md's "A
// listener off loopback that still accepts anonymous clients is reported by
// check-config (`warning: ...`)" and docs/config.md's auth section: one
// warning per tcp or websocket listener bound off loopback while
// allow_anonymous is true, none for a loopback one, none once anonymous
// access is off; a warning does not fail the check (exit 0). The gateway's
// WARN at start is TestRunWarnsAnonymousNetworkListener.
func TestCheckConfigWarnsAnonymousNetworkListener(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	t.Setenv("JOURNAL_STREAM", "")
	listeners := `
listeners:
  - {name: lan, address: "0.0.0.0:1883"}
  - {name: web, type: websocket, address: ":8083"}
  - {name: local, address: "127.0.0.1:1884"}
`
	open := writeConfig(t, listeners)
	code, out, errOut := call(t, "check-config", "--config", open)
	if code != exitOK || !strings.Contains(out, "name: lan") {
		t.Fatalf("check-config of an anonymous LAN listener: exit %d, want 0 with the effective config\n%s", code, errOut)
	}
	for _, want := range []string{
		"warning: " + open + `: listeners[0]: listener "lan" on 0.0.0.0:1883 accepts ANONYMOUS clients from the network`,
		"warning: " + open + `: listeners[1]: listener "web" on :8083 accepts ANONYMOUS clients from the network`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks\n%s\n%s", want, errOut)
		}
	}
	if n := strings.Count(errOut, "ANONYMOUS"); n != 2 {
		t.Errorf("%d anonymous warnings, want 2 (none for the loopback listener):\n%s", n, errOut)
	}

	// install.md's way to serve the LAN: a password file, anonymous off.
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("sensor1:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	closed := writeConfig(t, listeners+"auth: {allow_anonymous: false, password_file: "+passwd+"}\n")
	code, _, errOut = call(t, "check-config", "--config", closed)
	if code != exitOK || strings.Contains(errOut, "ANONYMOUS") {
		t.Errorf("check-config with allow_anonymous: false: exit %d, stderr:\n%s", code, errOut)
	}
}
