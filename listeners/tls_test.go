package listeners_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

// pki is a throwaway CA in t.TempDir that issues server and client
// certificates.
type pki struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	file string // CA certificate PEM
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1000),
		Subject:               pkix.Name{CommonName: "edgegw test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), cert: cert, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(cert)
	p.file = filepath.Join(p.dir, "ca.pem")
	writeFile(t, p.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	// Write then rename, as certificate tools do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// issue creates a certificate for cn with the given serial and returns its
// tls.Certificate; the PEM files are written to name.pem and name-key.pem.
func (p *pki) issue(name, cn string, serial int64, server bool) (certFile, keyFile string, cert tls.Certificate) {
	t := p.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	certFile = filepath.Join(p.dir, name+".pem")
	keyFile = filepath.Join(p.dir, name+"-key.pem")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// serverTLS issues the gateway's certificate (CN gw) and returns the
// listener's TLS configuration; with clientCA set, it asks for client
// certificates signed by that CA.
func (p *pki) serverTLS(clientCA string) *tls.Config {
	p.t.Helper()
	cert, key, _ := p.issue("server", "gw", 1, true)
	cfg, _, err := listeners.TLSConfig(cert, key, clientCA)
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

func (p *pki) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.pool, Certificates: certs, MinVersion: tls.VersionTLS12}
}

func TestTLSConfigBasics(t *testing.T) {
	p := newPKI(t)
	cert, key, _ := p.issue("server", "gw", 1, true)
	cfg, r, err := listeners.TLSConfig(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.NoClientCert || cfg.CipherSuites != nil || r == nil {
		t.Errorf("unexpected config: min %x auth %v suites %v", cfg.MinVersion, cfg.ClientAuth, cfg.CipherSuites)
	}
	cfg, _, err = listeners.TLSConfig(cert, key, p.file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil {
		t.Errorf("client_ca set: auth %v", cfg.ClientAuth)
	}

	// Errors name the file at fault.
	bad := filepath.Join(p.dir, "bad.pem")
	writeFile(t, bad, []byte("not pem"))
	missing := filepath.Join(p.dir, "missing.pem")
	for _, tc := range []struct{ name, cert, key, ca, want string }{
		{"missing_cert", missing, key, "", missing},
		{"missing_key", cert, missing, "", missing},
		{"bad_cert", bad, key, "", bad},
		{"missing_ca", cert, key, missing, missing},
		{"bad_ca", cert, key, bad, bad},
		{"mismatch", cert, p.file, "", cert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := listeners.TLSConfig(tc.cert, tc.key, tc.ca)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to name %s", err, tc.want)
			}
		})
	}
}

// TestTLSPaho: paho over tls:// and wss:// with server authentication only.
func TestTLSPaho(t *testing.T) {
	p := newPKI(t)
	cfg := p.serverTLS("")
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	tlsURL := "tls://" + h.tcp(cfg, false)
	wssURL := "wss://" + h.ws(func(l *listeners.WebSocket) { l.TLS = cfg }) + "/mqtt"
	withTLS := func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS()) }
	tc := mustPaho(t, tlsURL, "tls-client", withTLS)
	wc := mustPaho(t, wssURL, "wss-client", withTLS)
	t.Run("tls_to_wss", func(t *testing.T) { pubSub(t, wc, tc, "secure/a", 10) })
	t.Run("wss_to_tls", func(t *testing.T) { pubSub(t, tc, wc, "secure/b", 10) })

	// A client that does not trust the CA gets nowhere.
	if _, err := pahoConnect(t, tlsURL, "untrusting", func(o *mqtt.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: x509.NewCertPool()})
	}); err == nil {
		t.Error("client without the CA connected")
	}

	// TLS 1.2 minimum (docs/listeners.md), on the wire: a client that
	// offers at most TLS 1.1 fails its handshake, one that offers 1.2 only
	// completes it.
	for _, tc := range []struct {
		max uint16
		ok  bool
	}{{tls.VersionTLS11, false}, {tls.VersionTLS12, true}} {
		cfg := p.clientTLS()
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tc.max
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(tlsURL, "tls://"), cfg)
		if err == nil {
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("client offering at most TLS %x: handshake error %v, want success %v", tc.max, err, tc.ok)
		}
	}
}

// TestMTLS: with client_ca, a client without a certificate is refused, one
// with a certificate is accepted, and its CN reaches the gateway when
// UseCNAsUsername is set.
func TestMTLS(t *testing.T) {
	p := newPKI(t)
	cfg := p.serverTLS(p.file)
	_, _, client := p.issue("client", "sensor-17", 2, false)
	other := newPKI(t) // a CA the gateway does not trust
	_, _, stranger := other.issue("stranger", "intruder", 3, false)

	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	for _, tc := range []struct{ name, url string }{
		{"tcp", "tls://" + h.tcp(cfg, true)},
		{"websocket", "wss://" + h.ws(func(l *listeners.WebSocket) { l.TLS = cfg; l.UseCNAsUsername = true }) + "/mqtt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pahoConnect(t, tc.url, "nocert", func(o *mqtt.ClientOptions) {
				o.SetTLSConfig(p.clientTLS())
			}); err == nil {
				t.Error("client without certificate connected")
			}
			if _, err := pahoConnect(t, tc.url, "stranger", func(o *mqtt.ClientOptions) {
				o.SetTLSConfig(p.clientTLS(stranger))
			}); err == nil {
				t.Error("client with an untrusted certificate connected")
			}
			for len(h.cns) > 0 {
				if cn := <-h.cns; cn != "" {
					t.Errorf("refused client reached the gateway with CN %q", cn)
				}
			}
			c := mustPaho(t, tc.url, "withcert", func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS(client)) })
			if cn := h.nextCN(); cn != "sensor-17" {
				t.Errorf("certCN %q, want sensor-17", cn)
			}
			pubSub(t, c, c, "mtls/"+tc.name, 3)
		})
	}
	t.Run("cn_not_mapped", func(t *testing.T) {
		url := "tls://" + h.tcp(cfg, false)
		mustPaho(t, url, "withcert2", func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS(client)) })
		if cn := h.nextCN(); cn != "" {
			t.Errorf("certCN %q without UseCNAsUsername", cn)
		}
	})
}

// servedSerial handshakes with addr and returns the server certificate's
// serial number.
func servedSerial(t *testing.T, p *pki, addr string) int64 {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, p.clientTLS())
	if err != nil {
		t.Fatalf("tls dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestCertReload(t *testing.T) {
	p := newPKI(t)
	cert, key, _ := p.issue("server", "gw", 1, true)
	h := newHarness(t, gateway.Options{AllowAnonymous: true})

	t.Run("automatic", func(t *testing.T) {
		cfg, r, err := listeners.TLSConfig(cert, key, "")
		if err != nil {
			t.Fatal(err)
		}
		r.CheckInterval = time.Millisecond
		addr := h.tcp(cfg, false)
		if s := servedSerial(t, p, addr); s != 1 {
			t.Fatalf("serial %d, want 1", s)
		}
		p.issue("server", "gw", 2, true) // renewed in place
		testutil.Eventually(t, 5*time.Second, "renewed certificate", func() bool { return servedSerial(t, p, addr) == 2 })

		// A broken renewal keeps the working certificate.
		writeFile(t, cert, []byte("garbage"))
		time.Sleep(5 * time.Millisecond) // let the check interval pass
		if s := servedSerial(t, p, addr); s != 2 {
			t.Fatalf("serial %d after a broken renewal, want 2", s)
		}
		p.issue("server", "gw", 3, true)
		testutil.Eventually(t, 5*time.Second, "fixed certificate", func() bool { return servedSerial(t, p, addr) == 3 })
	})

	t.Run("explicit", func(t *testing.T) {
		cfg, r, err := listeners.TLSConfig(cert, key, "")
		if err != nil {
			t.Fatal(err)
		}
		r.CheckInterval = -1 // only Reload (SIGHUP) reloads
		addr := h.tcp(cfg, false)
		was := servedSerial(t, p, addr)
		p.issue("server", "gw", 10, true)
		if s := servedSerial(t, p, addr); s != was {
			t.Fatalf("serial %d before Reload, want %d", s, was)
		}
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		if s := servedSerial(t, p, addr); s != 10 {
			t.Fatalf("serial %d after Reload, want 10", s)
		}
		writeFile(t, key, []byte("garbage"))
		if err := r.Reload(); err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("Reload with a broken key: %v, want an error naming %s", err, key)
		}
		if s := servedSerial(t, p, addr); s != 10 {
			t.Fatalf("serial %d after a failed Reload, want 10", s)
		}
	})
}
