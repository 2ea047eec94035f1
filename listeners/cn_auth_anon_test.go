package listeners_test

import (
	"os"
	"path/filepath"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/listeners"
)

// TestCNListenerOtherUserAllowAnonymous: docs/listeners.md says a client
// on a use_cn_as_username listener that sends another user name "needs
// that user's password", and security.md that it "is checked like any
// other". With allow_anonymous true (the default) and no password file
// nothing checks it: a certificate issued to sensor-17 that sends the
// user name alice gets in as alice and takes alice's ACL rules.
func TestCNListenerOtherUserAllowAnonymous(t *testing.T) {
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
	h := newHarness(t, gateway.Options{AllowAnonymous: true, Authenticator: files, Authorizer: files})
	mtls := "tls://" + h.tcp(cfg, true)
	c, err := pahoConnect(t, mtls, "intruder", func(o *mqtt.ClientOptions) {
		o.SetTLSConfig(p.clientTLS(client)).SetUsername("alice")
	})
	if err != nil {
		return // refused: what the docs say
	}
	tok := c.Subscribe("alice/#", 1, nil)
	waitTok(t, tok, "subscribe")
	if codes := tok.(*mqtt.SubscribeToken).Result(); codes["alice/#"] != 0x80 {
		t.Fatalf("sensor-17's certificate got in as alice without alice's password and may subscribe to alice/# (granted QoS %d)", codes["alice/#"])
	}
}
