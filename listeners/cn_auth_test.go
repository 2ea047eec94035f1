package listeners_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
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

// TestCNListenerOtherUserAllowAnonymous: docs/listeners.md says a client
// on a use_cn_as_username listener that sends another user name "needs
// that user's password", and security.md that it "is checked like any
// other". With allow_anonymous true (the default) and no password file
// nothing could check it: a certificate issued to sensor-17 that sent the
// user name alice got in as alice and took alice's ACL rules. It is
// refused (4 / 0x86).
func TestCNListenerOtherUserAllowAnonymous(t *testing.T) {
	p, cfg, client, files := cnAuthRig(t)
	h := newHarness(t, gateway.Options{AllowAnonymous: true, Authenticator: files, Authorizer: files})
	mtls := "tls://" + h.tcp(cfg, true)
	c, err := pahoConnect(t, mtls, "intruder", func(o *mqtt.ClientOptions) {
		o.SetTLSConfig(p.clientTLS(client)).SetUsername("alice")
	})
	if err != nil {
		if !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			t.Fatalf("refused with %v, want 4 (bad user name or password)", err)
		}
		// Its own CN, or no user name, still gets in.
		mustPaho(t, mtls, "cert-named", func(o *mqtt.ClientOptions) {
			o.SetTLSConfig(p.clientTLS(client)).SetUsername("sensor-17")
		})
		mustPaho(t, mtls, "cert-only", func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS(client)) })
		return
	}
	tok := c.Subscribe("alice/#", 1, nil)
	waitTok(t, tok, "subscribe")
	if codes := tok.(*mqtt.SubscribeToken).Result(); codes["alice/#"] != 0x80 {
		t.Fatalf("sensor-17's certificate got in as alice without alice's password and may subscribe to alice/# (granted QoS %d)", codes["alice/#"])
	}
}

// cnAuthRig is the CN tests' setup: a PKI, a server TLS config that asks
// for client certificates, the certificate of device sensor-17, and auth
// files with an ACL for alice and sensor-17 and no password file.
func cnAuthRig(t *testing.T) (*pki, *tls.Config, tls.Certificate, *auth.Files) {
	t.Helper()
	p := newPKI(t)
	cfg := p.serverTLS(p.file)
	_, _, client := p.issue("client", "sensor-17", 2, false)
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
