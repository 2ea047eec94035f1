package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadEnvFile: the subset of systemd's EnvironmentFile= syntax that
// readEnvFile takes, and a line it refuses.
func TestReadEnvFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "env")
	body := `# a comment
; another

EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw
export GATEWAY_ID=north-7
  SPACED = value with spaces  
DQ="a \"quoted\" \\ value"
SQ='single $x'
EMPTY=
`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readEnvFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw", "GATEWAY_ID=north-7", "SPACED=value with spaces",
		`DQ=a "quoted" \ value`, "SQ=single $x", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n got %q\nwant %q", got, want)
	}
	if err := os.WriteFile(p, []byte("OK=1\nnot a setting\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readEnvFile(p); err == nil || !strings.Contains(err.Error(), p+":2: want KEY=VALUE") {
		t.Errorf("bad line: %v", err)
	}
}

// TestCheckConfigEnvFile: check-config --env-file loads the config with
// the file's variables on top of the process's, for EDGEGW_* overrides and
// ${env:NAME} alike, and says which variables changed what and where each
// came from; a missing file is a usage error.
func TestCheckConfigEnvFile(t *testing.T) {
	env := filepath.Join(t.TempDir(), "edgegw.env")
	if err := os.WriteFile(env, []byte("EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw\nGATEWAY_ID=north-7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `
bridges:
  - name: cloud
    client_id: "gw-${env:GATEWAY_ID}"
    addresses: [tcp://127.0.0.1:1884]
    topics: [{pattern: "sensors/#"}]
`)
	t.Setenv("EDGEGW_LOG_LEVEL", "debug")
	code, out, errOut := call(t, "check-config", "--config", cfg, "--env-file", env)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"# environment file " + env + " (as the service reads it) sets: EDGEGW_PERSISTENCE_DIR, GATEWAY_ID\n",
		"# environment overrides: EDGEGW_LOG_LEVEL (from the environment), EDGEGW_PERSISTENCE_DIR (from " + env + ")\n",
		"dir: /var/lib/edgegw\n",
		"client_id: gw-north-7\n",
		"level: debug\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check-config output lacks %q:\n%s", want, out)
		}
	}
	code, _, errOut = call(t, "check-config", "--config", cfg, "--env-file", env+".missing")
	if code != exitUsage || !strings.Contains(errOut, "environment file: open "+env+".missing") {
		t.Errorf("missing environment file: exit %d, stderr %q", code, errOut)
	}
	// Without the file, ${env:GATEWAY_ID} is unset: named by key.
	code, _, errOut = call(t, "check-config", "--config", cfg, "--env-file=")
	if code != exitUsage || !strings.Contains(errOut, "bridges[0].client_id: ${env:GATEWAY_ID}: environment variable GATEWAY_ID is not set") {
		t.Errorf("without the file: exit %d, stderr %q", code, errOut)
	}
}
