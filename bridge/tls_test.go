package bridge_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM certificate
}

// certify makes a certificate of tmpl with a new P-256 key and a random
// serial, signed by ca (nil: by itself).
func certify(t *testing.T, tmpl *x509.Certificate, ca *testCA) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64)); err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	parent, parentKey := tmpl, key
	if ca != nil {
		parent, parentKey = ca.cert, ca.key
	}
	if der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey); err != nil {
		t.Fatal(err)
	}
	return der, key
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	der, key := certify(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".crt")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue signs a leaf certificate for cn (a server one when server is set:
// valid for 127.0.0.1 and localhost) and writes <cn>.crt and <cn>.key.
func (ca *testCA) issue(t *testing.T, dir, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, key := certify(t, tmpl, ca)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTLSUplink runs the bridge against a mosquitto TLS listener that
// requires a client certificate (AWS IoT-style mutual TLS): out and in
// messages cross over tls:// with the bridge's client certificate; a bridge
// that trusts another CA, and one without a client certificate, are
// refused, stay disconnected, and say why in LastError.
func TestTLSUplink(t *testing.T) {
	// Started as root, mosquitto drops to user "mosquitto" before it loads
	// its certificate and key: they go in a directory anyone can read
	// (t.TempDir's is private). Test keys only.
	dir, err := os.MkdirTemp("", "edgegw-bridge-tls-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t, dir, "cloud-ca")
	srvCert, srvKey := ca.issue(t, dir, "broker", true)
	cliCert, cliKey := ca.issue(t, dir, "edge-01", false)
	otherCA := newTestCA(t, dir, "other-ca")

	tlsPort := freePort(t)
	// The plain listener is the test's own view of the cloud broker.
	conf := fmt.Sprintf("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate true\n",
		tlsPort, ca.file, srvCert, srvKey)
	up := startMosquittoConf(t, conf, tlsPort)
	tlsURL := "tls://127.0.0.1:" + strconv.Itoa(tlsPort)

	t.Run("mtls", func(t *testing.T) {
		gw := startGateway(t)
		upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
		localSub := subscribe(t, gw.addr, "local-sub", "cmd/#", 1)
		cfg := testConfig(t, "tls", tlsURL)
		cfg.TLS = bridge.TLSConfig{CA: ca.file, Cert: cliCert, Key: cliKey}
		b := runBridge(t, cfg, gw.srv)
		b.waitState(t, bridge.Connected)
		lc := client(t, gw.addr, "local-pub")
		publishMany(t, lc, "sensors/t1", 50, "m")
		publish(t, client(t, up.addr(), "up-pub"), "site-a/cmd/x", 1, "reboot")
		testutil.Eventually(t, 10*time.Second, "out messages upstream over TLS", func() bool {
			return countDistinct(upSub.all(), "site-a/sensors/t1") == 50
		})
		inOrder(t, upSub.all(), "site-a/sensors/t1", "m", 50)
		testutil.Eventually(t, 10*time.Second, "in message locally", func() bool { return localSub.has("cmd/x", "reboot") })
		st := b.Stats()
		t.Logf("TLS mtls: state %s address %s connects %d acked %d received %d", st.State, st.Address, st.Connects, st.Acked, st.Received)
		if st.Address != tlsURL || st.ConnectFailures != 0 {
			t.Errorf("stats %+v", st)
		}
	})

	refused := []struct {
		name string
		tls  bridge.TLSConfig
		why  []string // LastError contains one of these (nil: any)
	}{
		{"wrong CA", bridge.TLSConfig{CA: otherCA.file, Cert: cliCert, Key: cliKey},
			[]string{"certificate signed by unknown authority"}},
		// mosquitto refuses the handshake: the bridge sees its alert
		// ("tls: certificate required") or, racing it, the reset.
		{"no client certificate", bridge.TLSConfig{CA: ca.file}, nil},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			gw := startGateway(t)
			states := subscribe(t, gw.addr, "state-sub", "$SYS/bridge/+/state", 1)
			cfg := testConfig(t, "tls", tlsURL)
			cfg.TLS = tc.tls
			b := runBridge(t, cfg, gw.srv)
			testutil.Eventually(t, 10*time.Second, "failed connects", func() bool { return b.Stats().ConnectFailures >= 2 })
			st := b.Stats()
			t.Logf("TLS %s: state %s, connect failures %d, last error %q", tc.name, st.State, st.ConnectFailures, st.LastError)
			if st.State != bridge.Disconnected || st.Connects != 0 {
				t.Errorf("state %s, connects %d: want disconnected, never connected", st.State, st.Connects)
			}
			ok := tc.why == nil
			for _, w := range tc.why {
				ok = ok || strings.Contains(st.LastError, w)
			}
			if !ok || !strings.Contains(st.LastError, tlsURL) {
				t.Errorf("LastError %q: want the address and one of %q", st.LastError, tc.why)
			}
			testutil.Eventually(t, 5*time.Second, "state topic", func() bool { return states.has("$SYS/bridge/tls/state", "disconnected") })
			if states.has("$SYS/bridge/tls/state", "connected") {
				t.Errorf("state topic said connected")
			}
		})
	}
}
