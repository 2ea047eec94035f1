package listeners_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/listeners"
)

// TestCNOnlyAuthentication: allow_anonymous false, no password file, one
// listener taking the certificate's CN as user name (a valid config:
// certificates are the only credential). A client is let in only when its
// certificate names it: a user name in CONNECT, with any password or none,
// is refused on the plain listener and on the mTLS one, where it would
// otherwise replace the CN. Before, nothing checked such a name: any
// client got in as any user, with that user's ACL rules. The same with an
// ACL file (an Authenticator that has no passwords) and without one.
func TestCNOnlyAuthentication(t *testing.T) {
	p, cfg, client, files := cnAuthRig(t)
	for _, tc := range []struct {
		name string
		opts gateway.Options
	}{
		{"acl file", gateway.Options{AllowAnonymous: false, Authenticator: files, Authorizer: files}},
		{"no auth files", gateway.Options{AllowAnonymous: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			plain := "tcp://" + h.tcp(nil, false)
			mtls := "tls://" + h.tcp(cfg, true)
			withCert := func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS(client)) }
			for _, c := range []struct {
				what, url string
				mod       func(*mqtt.ClientOptions)
			}{
				{"plain, a user name and a wrong password", plain, func(o *mqtt.ClientOptions) { o.SetUsername("alice").SetPassword("wrong") }},
				{"plain, a user name and no password", plain, func(o *mqtt.ClientOptions) { o.SetUsername("alice") }},
				{"plain, no user name", plain, nil},
				{"certificate, another user name, no password", mtls, func(o *mqtt.ClientOptions) { withCert(o); o.SetUsername("alice") }},
				{"certificate, another user name and a password", mtls, func(o *mqtt.ClientOptions) { withCert(o); o.SetUsername("alice").SetPassword("x") }},
			} {
				if _, err := pahoConnect(t, c.url, "intruder", c.mod); err == nil {
					t.Errorf("%s: connected", c.what)
				}
			}
			// The certificate alone, or with its own CN as user name.
			s1 := mustPaho(t, mtls, "cert-only", withCert)
			s2 := mustPaho(t, mtls, "cert-named", func(o *mqtt.ClientOptions) { withCert(o); o.SetUsername("sensor-17") })
			pubSub(t, s1, s2, "sensor-17/x", 2)
		})
	}
}

// cnAuthRig is the CN tests' setup: a PKI, a server TLS config that asks
// for client certificates, the certificate of device sensor-17, and auth
// files with an ACL for alice and sensor-17 and no password file.
func cnAuthRig(t *testing.T) (*pki, *tls.Config, tls.Certificate, *auth.Files) {
	t.Helper()
	p := newPKI(t)
	cert, key, _ := p.issue("server", "gw", 1, true)
	_, _, client := p.issue("client", "sensor-17", 2, false)
	cfg, _, err := listeners.TLSConfig(cert, key, p.file)
	if err != nil {
		t.Fatal(err)
	}
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("user alice\ntopic readwrite alice/#\nuser sensor-17\ntopic readwrite sensor-17/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{ACLFile: acl}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	return p, cfg, client, files
}
