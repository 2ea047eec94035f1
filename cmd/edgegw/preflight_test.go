package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/config"
)

// writeCert writes a self-signed certificate valid from notBefore to
// notAfter and its key as PEM files in dir, named name.crt and name.key.
func writeCert(t *testing.T, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// TestConfigFilesChecked: check-config opens and parses every file the
// config names, reports each problem with its key on its own line and
// exits 2; run reports the same lines and exits 2 before binding anything
// (issue 15, point 2). Certificate validity problems are warnings only.
func TestConfigFilesChecked(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	goodCert, goodKey := writeCert(t, dir, "good", now.Add(-time.Hour), now.Add(365*24*time.Hour))
	_, otherKey := writeCert(t, dir, "other", now.Add(-time.Hour), now.Add(365*24*time.Hour))
	soonCert, soonKey := writeCert(t, dir, "soon", now.Add(-time.Hour), now.Add(10*24*time.Hour))
	oldCA, _ := writeCert(t, dir, "oldca", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	notPEM := filepath.Join(dir, "not.pem")
	badACL := filepath.Join(dir, "acl")
	badPasswd := filepath.Join(dir, "passwd")
	for f, body := range map[string]string{notPEM: "hello\n", badACL: "user alice\ntopic sometimes a/#\n", badPasswd: "alice\n"} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")

	t.Run("every problem", func(t *testing.T) {
		cfg := writeConfig(t, `
listeners:
  - name: a
    address: 127.0.0.1:0
    tls: {cert: `+missing+`.crt, key: `+missing+`.key, client_ca: `+notPEM+`}
  - name: b
    address: 127.0.0.1:0
    tls: {cert: `+goodCert+`, key: `+otherKey+`}
auth:
  password_file: `+badPasswd+`
  acl_file: `+badACL+`
bridges:
  - name: cloud
    client_id: gw
    addresses: [tls://127.0.0.1:8883]
    tls: {ca: `+missing+`-ca.pem}
    topics: [{pattern: "x/#"}]
`)
		want := []string{
			cfg + ": auth.password_file: " + badPasswd + ":1: want user:bcrypt-hash",
			cfg + ": auth.acl_file: " + badACL + `:2: access "sometimes"`,
			cfg + ": listeners[0].tls.cert: open " + missing + ".crt: no such file or directory",
			cfg + ": listeners[0].tls.key: open " + missing + ".key: no such file or directory",
			cfg + ": listeners[0].tls.client_ca: " + notPEM + ": no PEM certificate found",
			cfg + ": listeners[1].tls.key: " + otherKey + " with " + goodCert + ": tls: private key does not match public key",
			cfg + ": bridges[0].tls.ca: open " + missing + "-ca.pem: no such file or directory",
			"edgegw: invalid configuration: 7 problem(s)",
		}
		for _, cmd := range []string{"check-config", "run"} {
			code, out, errOut := call(t, cmd, "--config", cfg)
			if code != exitUsage || out != "" {
				t.Fatalf("%s: exit %d, stdout %q, want 2 and nothing", cmd, code, out)
			}
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if len(lines) != len(want) {
				t.Errorf("%s: %d lines, want %d:\n%s", cmd, len(lines), len(want), errOut)
			}
			for _, w := range want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("%s: no line starting %q in:\n%s", cmd, w, errOut)
				}
			}
			for _, doubled := range []string{`\n`, "password file: password file", "acl file: acl file", "tls: tls:"} {
				if strings.Contains(errOut, doubled) {
					t.Errorf("%s: output contains %q:\n%s", cmd, doubled, errOut)
				}
			}
		}
	})

	t.Run("warnings pass", func(t *testing.T) {
		passwd := writePasswd(t, filepath.Join(dir, "passwd.ok"), "alice", "pw")
		cfg := writeConfig(t, `
listeners:
  - name: a
    address: 127.0.0.1:0
    tls: {cert: `+soonCert+`, key: `+soonKey+`, client_ca: `+oldCA+`}
  - name: b
    address: 127.0.0.1:0
    tls: {cert: `+goodCert+`, key: `+goodKey+`}
auth:
  allow_anonymous: false
  password_file: `+passwd+`
`)
		code, out, errOut := call(t, "check-config", "--config", cfg)
		if code != 0 || !strings.Contains(out, "effective configuration") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		for _, w := range []string{
			"warning: " + cfg + ": listeners[0].tls.cert: " + soonCert + `: certificate "CN=soon" expires on`,
			"warning: " + cfg + ": listeners[0].tls.client_ca: " + oldCA + `: certificate "CN=oldca" expired on`,
		} {
			if !strings.Contains(errOut, w) {
				t.Errorf("stderr lacks %q:\n%s", w, errOut)
			}
		}
		if n := strings.Count(errOut, "\n"); n != 2 {
			t.Errorf("%d lines on stderr, want 2:\n%s", n, errOut)
		}
	})
}

// TestRunWarnsAnonymousNetworkListener: run logs a WARN at start for each
// listener that accepts anonymous clients from the network (issue 13,
// point 8). The address is TEST-NET-1 (192.0.2.1, RFC 5737), which no host
// has: the bind then fails, so nothing is exposed while the test runs.
func TestRunWarnsAnonymousNetworkListener(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	cfg := writeConfig(t, `
listeners:
  - {name: local, address: "127.0.0.1:0"}
  - {name: lan, address: "192.0.2.1:0"}
metrics: {address: ""}
`)
	code, _, errOut := call(t, "--config", cfg)
	if code != exitFailure {
		t.Fatalf("exit %d, want 1 (the bind fails):\n%s", code, errOut)
	}
	want := `level=WARN msg="config warning" key=listeners[1] problem="listener \"lan\" on 192.0.2.1:0 accepts ANONYMOUS clients from the network`
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks\n%s\n%s", want, errOut)
	}
	if strings.Count(errOut, "ANONYMOUS") != 1 {
		t.Errorf("want exactly one anonymous warning (not for the loopback listener):\n%s", errOut)
	}
	if !strings.Contains(errOut, `level=ERROR msg="gateway failed"`) {
		t.Errorf("no gateway failed line:\n%s", errOut)
	}
}

// TestLateConfigErrors: a file that goes missing between preflight and the
// start still fails as a config problem (exit 2, not restarted by the
// unit), named once: `bridge "cloud": ca: ...`, not `bridge cloud: bridge
// "cloud": ...`.
func TestLateConfigErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for name, mod := range map[string]func(*config.Config){
		"auth": func(c *config.Config) { c.Auth.PasswordFile = missing },
		"listener": func(c *config.Config) {
			c.Listeners[0].TLS = config.ListenerTLS{Cert: missing, Key: missing}
		},
		"bridge": func(c *config.Config) {
			b := config.DefaultBridge()
			b.Name, b.ClientID, b.Addresses = "cloud", "gw", []string{"tls://127.0.0.1:8883"}
			b.TLS.CA = missing
			b.Topics = []config.BridgeTopic{{Pattern: "x/#", Direction: "out", QoS: 1}}
			c.Bridges = []config.Bridge{b}
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Listeners[0].Address = "127.0.0.1:0"
			cfg.Metrics.Address = ""
			mod(&cfg)
			err := run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if !errors.As(err, new(configError)) {
				t.Fatalf("run: %v (%T), want a configError", err, err)
			}
			if msg := err.Error(); strings.Count(msg, "bridge") > 1 || !strings.Contains(msg, missing) {
				t.Errorf("error %q", msg)
			}
		})
	}
}

// TestCheckConfigShowsFleetExpansion: check-config prints the bridge
// fields with ${HOSTNAME} expanded, as the gateway will use them.
func TestCheckConfigShowsFleetExpansion(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `
bridges:
  - name: cloud
    client_id: gw-${HOSTNAME}
    addresses: [tcp://127.0.0.1:1884]
    topics: [{pattern: "sensors/#", remote_prefix: "farms/${HOSTNAME}/"}]
`)
	code, out, errOut := call(t, "check-config", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"client_id: gw-" + host, "remote_prefix: farms/" + host + "/"} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %q:\n%s", want, out)
		}
	}
}

// TestPrivilegedPortIsConfigError: binding a port below 1024 without the
// capability is a config problem (exit 2: restarting cannot help), with
// the hint. Runs the binary as nobody, since the tests run as root.
func TestPrivilegedPortIsConfigError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (make test does) to start the binary as nobody")
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if start <= 1 {
		t.Skipf("net.ipv4.ip_unprivileged_port_start is %d: every port is unprivileged here", start)
	}
	g := newHarness(t).NoMetrics()
	g.Cfg.Listeners[0].Name = "low"
	g.Cfg.Listeners[0].Address = fmt.Sprintf("127.0.0.1:%d", start-1)
	dir := filepath.Dir(g.ConfigPath)
	for _, d := range []string{dir, filepath.Dir(dir)} { // t.TempDir makes them 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g.Prepare = func(cmd *exec.Cmd, _ *os.File) {
		os.Chmod(g.ConfigPath, 0o644)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	g.Launch()
	if code := g.WaitExit(); code != exitUsage {
		t.Fatalf("exit %d, want 2", code)
	}
	out := g.Logs()
	if !strings.Contains(out, "permission denied") || !strings.Contains(out, "CAP_NET_BIND_SERVICE") {
		t.Errorf("output:\n%s", out)
	}
}

// TestCheckConfigWarnsListenerNobodyCanUse: with allow_anonymous false
// and no password file only a certificate's CN gets in (docs/config.md),
// so check-config warns about each listener without
// tls.use_cn_as_username, plain, serial or mTLS alike: no client can
// connect to it. The use_cn_as_username listener gets no warning.
func TestCheckConfigWarnsListenerNobodyCanUse(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cert, key := writeCert(t, dir, "gw", now.Add(-time.Hour), now.Add(365*24*time.Hour))
	ca, _ := writeCert(t, dir, "ca", now.Add(-time.Hour), now.Add(365*24*time.Hour))
	cfg := writeConfig(t, `
listeners:
  - name: certs
    address: 127.0.0.1:0
    tls: {cert: `+cert+`, key: `+key+`, client_ca: `+ca+`, use_cn_as_username: true}
  - {name: plain, address: "127.0.0.1:0"}
  - name: mtls
    address: 127.0.0.1:0
    tls: {cert: `+cert+`, key: `+key+`, client_ca: `+ca+`}
  - {name: uart, type: serial, device: /dev/null}
metrics: {address: ""}
auth:
  allow_anonymous: false
`)
	code, _, errOut := call(t, "check-config", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for i, w := range []string{`listener "plain" on 127.0.0.1:0`, `listener "mtls" on 127.0.0.1:0`, `listener "uart" on /dev/null`} {
		want := fmt.Sprintf("warning: %s: listeners[%d]: %s: no client can connect to it", cfg, i+1, w)
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if n := strings.Count(errOut, "no client can connect to it"); n != 3 {
		t.Errorf("%d warnings, want 3 (none for the use_cn_as_username listener):\n%s", n, errOut)
	}
}

// TestCheckConfigWarnsEnginePaho: bridges[].engine paho names the engine
// that was removed (docs/config.md): check-config accepts the config
// with a warning that says so and what to do, and the session engine
// runs; engine: session gets no warning.
func TestCheckConfigWarnsEnginePaho(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	t.Setenv("JOURNAL_STREAM", "")
	bridges := func(engine string) string {
		return "metrics: {address: \"\"}\nbridges:\n  - {name: cloud, addresses: [\"tcp://127.0.0.1:1883\"], client_id: edge-1, engine: " + engine + ", topics: [{pattern: \"s/#\", direction: out}]}\n"
	}
	path := writeConfig(t, bridges("paho"))
	code, _, errOut := call(t, "check-config", "--config", path)
	want := "warning: " + path + ": bridges[0].engine: paho was removed: the session engine is the bridge's only uplink and runs instead; delete the line"
	if code != exitOK || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr lacks\n%s\n%s", code, want, errOut)
	}
	path = writeConfig(t, bridges("session"))
	if code, _, errOut := call(t, "check-config", "--config", path); code != exitOK || strings.Contains(errOut, "engine") {
		t.Fatalf("engine: session: exit %d, stderr:\n%s", code, errOut)
	}
}
